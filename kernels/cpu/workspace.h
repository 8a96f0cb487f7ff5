// The ops' workspace: scratch memory an op needs only while it runs (oneDNN's scratchpads, a softmax's
// rows, attention's score gradients), per thread, either the thread's own or a region bound to it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry::kernels::cpu {

// oneDNN's scratchpad; the op's own buffers; the fp32 copies of an op's 2-byte operands (models/cpu_op.cpp),
// alive around the op while it uses the other two.
enum class Scratch { Library, Op, Storage };

// This thread's workspace of the kind, at least `bytes` long (64-byte aligned). Valid until the next call
// for the same kind on this thread. Unbound, it is the thread's own buffer, grown when an op needs more
// and never shrunk; every growth is a counted device allocation (memory/device_allocations.h), so a run
// that sizes it at start-up (by running every op once) provably allocates nothing per step. Bound
// (bind_workspace), it is the bound region and never allocates: a request larger than the region throws.
float* workspace(Scratch kind, int64_t bytes);
// The bytes this thread's workspace of the kind holds now (the bound region's size while one is bound).
int64_t workspace_bytes(Scratch kind);

// From now on this thread's workspace of the kind is [data, data + bytes): memory someone else planned
// (the plan's workspace tensor in the device arena), so that the ops on this thread allocate none of
// their own. data must be 64-byte aligned. nullptr unbinds: the thread's own buffer again.
void bind_workspace(Scratch kind, std::byte* data, int64_t bytes);

}  // namespace ferry::kernels::cpu
