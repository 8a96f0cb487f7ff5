// Simulator: replays a Schedule on a CostModel as a discrete-event simulation of the compute stream, the
// h2d and d2h copy streams and the CPU AdamW pool, honouring every dependency, and checks the schedule:
// every use of a bucket after its arrival, gradients offloaded only once written and released only once
// offloaded, and the device's peak (laid out by the Planner) within the budget.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memory/planner.h"
#include "offload/problem.h"
#include "offload/schedule.h"

namespace ferry::offload {

struct SimResult {
  std::string error;                // empty when the schedule is valid; else which op and which bucket
  bool fits = false;                // valid and the peak within the budget
  double step_s = 0;                // predicted step time
  double lower_bound_s = 0;         // max(compute, h2d bytes / bw, d2h bytes / bw, CPU AdamW) of this schedule
  double stall_s = 0;               // compute time spent waiting for copies
  std::vector<double> stall_before_op;
  int64_t h2d_bytes = 0, d2h_bytes = 0;
  double compute_busy_s = 0, h2d_busy_s = 0, d2h_busy_s = 0, cpu_busy_s = 0;
  int64_t peak_device_bytes = 0;        // the Planner's peak for everything the schedule puts on the device
  int64_t resident_bytes = 0;           // working copies that stay on the device
  int64_t offloaded_bytes = 0;          // working copies that travel
};

// One thing the schedule keeps on the device, with its live interval over the op list.
struct DeviceTensor {
  enum class Kind {
    Activation,      // index: an entry of problem.activations
    Weights,         // index: bucket; a travelling window (from its Prefetch to its Release) or a resident slot
    Grads,           // index: bucket; its gradients during backward, until released
    OptimizerState,  // index: bucket; fp32 master, m and v, in that order (optimizer on the device)
    GradSum,         // index: bucket; fp32 sum over micro-batches (optimizer on the device, grad_accum > 1)
  };
  Kind kind;
  int index;
  memory::TensorLifetime life;
};

// Everything the schedule keeps on the device. Weight windows appear in the order of their Prefetch.
std::vector<DeviceTensor> device_tensors(const OffloadProblem& problem, const Schedule& schedule);
std::vector<memory::TensorLifetime> lifetimes(const std::vector<DeviceTensor>& tensors);

SimResult simulate(const OffloadProblem& problem, const Schedule& schedule);

}  // namespace ferry::offload
