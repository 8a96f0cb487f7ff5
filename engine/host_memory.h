// What a run will hold in host memory, estimated from its plan before the large allocations, and whether
// the machine has it: `ferry plan` prints it, `ferry train` refuses a run the machine cannot hold.
#pragma once

#include <cstdint>
#include <string>

#include "models/model_spec.h"
#include "offload/policies.h"

namespace ferry::engine {

struct HostMemoryEstimate {
  // The pinned pool: per bucket the fp32 master, m and v, the working copy and the gradient landing region
  // (those two in the precision, one region where the gradients land on the working copy: 14 bytes a parameter
  // in bf16), and the executor's staging (batch, fp32 gradient sums, delayed buffers).
  int64_t host_buckets = 0;
  int64_t op_scratch = 0;    // the host device's ops: fp32 copies of the largest op's 2-byte operands, its own scratch
  int64_t device_arena = 0;  // the host device's arena (host memory; none on a GPU)
  int64_t total() const { return host_buckets + op_scratch + device_arena; }
  // "4.08 GiB (host buckets 2.31 GiB, ...)"
  std::string describe() const;
};

// On the host device (`host_device`) the plan's arena is host memory too.
HostMemoryEstimate estimate_host_memory(const models::ModelSpec& spec, const offload::StepPlan& plan, bool host_device);

// The memory the machine can give a new allocation: /proc/meminfo's MemAvailable, or the environment
// variable FERRY_HOST_MEMORY_AVAILABLE (a size such as 64GiB: to keep headroom, or in tests). -1: unknown.
int64_t available_host_memory();

// Empty when `needed` bytes (the estimate's total, or what of it is still to allocate) fit in `available` (or
// availability is unknown); else what is short and what to do.
std::string host_memory_shortfall(const HostMemoryEstimate& estimate, int64_t needed, int64_t available);

}  // namespace ferry::engine
