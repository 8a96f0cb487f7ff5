// What a run will hold in host memory, estimated from its plan before the large allocations, and whether
// the machine has it: `ferry plan` prints it, `ferry train` refuses a run the machine cannot hold.
#pragma once

#include <cstdint>
#include <string>

#include "models/model_spec.h"
#include "offload/policies.h"

namespace ferry::engine {

struct HostMemoryEstimate {
  int64_t host_buckets = 0;  // per bucket: fp32 master, m, v, the working copy and the gradient landing region
  int64_t model_copy = 0;    // fp32 weights and gradients per parameter, read by evaluation and start-up profiling
  int64_t evaluation = 0;    // the evaluator's activations: a whole step's, without checkpointing
  int64_t device_arena = 0;  // the host device's arena (host memory; none on a GPU)
  int64_t total() const { return host_buckets + model_copy + evaluation + device_arena; }
  // "4.08 GiB (host buckets 2.31 GiB, model copy ..., ...)"
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
