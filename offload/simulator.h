// Simulator: checks a Schedule (every use of a bucket after its arrival, gradients offloaded only once
// written and released only once offloaded, the device memory laid out for this very schedule), replays
// it on the CostModel as a discrete-event simulation of the compute stream, the h2d and d2h copy streams
// and the CPU AdamW pool, honouring every dependency, checks that memory the plan reuses is written only
// after every stream is done with its earlier tensor, and reads the device's peak from the plan's
// DeviceMemory (it never runs the Planner itself).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "offload/device_memory.h"
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
  int64_t peak_device_bytes = 0;        // memory.layout.peak: the arena everything the schedule keeps on the device needs
  int64_t resident_bytes = 0;           // working copies that stay on the device
  int64_t offloaded_bytes = 0;          // working copies that travel
};

// The buckets the CPU updates, in the order it updates them: as their gradients land (the order of their
// CpuAdam actions), or with the pipelined update in the order of their first use in the forward pass.
std::vector<int> cpu_update_order(const OffloadProblem& problem, const Schedule& schedule);
// `buckets` sorted by the first op that uses each (stable; unused ones last).
std::vector<int> in_first_use_order(const OffloadProblem& problem, std::vector<int> buckets);

// Every check of the schedule against the problem and its device memory, without timing anything.
// Empty when valid; else before which op, which action on which bucket, and what is wrong.
std::string validate(const OffloadProblem& problem, const Schedule& schedule, const DeviceMemory& memory);

// validate, then the replay's timings and the peak of `memory` (which must be lay_out(problem, schedule)).
// With an error, only `error` is set.
SimResult simulate(const OffloadProblem& problem, const Schedule& schedule, const DeviceMemory& memory);

// The replay's timings without laying the memory out, to compare candidates quickly: peak_device_bytes is
// the most bytes alive at once (what every layout needs at least) and fits compares it with the budget.
SimResult estimate(const OffloadProblem& problem, const Schedule& schedule);

}  // namespace ferry::offload
