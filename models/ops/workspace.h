// The ops' workspace: scratch memory an op needs only while it runs (oneDNN's scratchpads, a softmax's
// rows, attention's score gradients). Each thread that runs ops has its own, grown when an op needs more
// and never shrunk; every growth is a counted device allocation (memory/device_allocations.h), so a run
// that sizes it at start-up (by running every op once) provably allocates nothing per step.
#pragma once

#include <cstdint>

namespace ferry::models::ops {

// oneDNN's scratchpad; the op's own buffers; the fp32 copies of an op's 2-byte operands (models/cpu_op.cpp),
// alive around the op while it uses the other two.
enum class Scratch { Library, Op, Storage };

// This thread's workspace of the kind, at least `bytes` long (64-byte aligned). Valid until the next call
// for the same kind on this thread.
float* workspace(Scratch kind, int64_t bytes);
// The bytes this thread's workspace of the kind holds now.
int64_t workspace_bytes(Scratch kind);

}  // namespace ferry::models::ops
