// The placement policies: resident (no offload), zero-offload (ZeRO-Offload's placement), chunk-lru
// (Gemini-like on-demand fetch with LRU eviction) and greedy (Ferry's). Each turns an OffloadProblem into
// a Schedule that fits the budget, or fails saying how much memory the model needs at least.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "offload/problem.h"
#include "offload/schedule.h"
#include "offload/simulator.h"

namespace ferry::offload {

enum class Policy { Resident, ZeroOffload, ChunkLru, Greedy };
const char* to_string(Policy policy);
Policy parse_policy(const std::string& name);  // resident | zero-offload | chunk-lru | greedy
const std::vector<Policy>& all_policies();

// The budget cannot hold what the policy must keep on the device.
struct BudgetError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The least device memory any policy can run in: at every op, its activations, the buckets it uses and
// the gradient buffers it writes.
int64_t minimum_device_bytes(const OffloadProblem& problem);

// No plan can be faster: resident's step when everything fits the budget; otherwise the largest of the
// compute time, every gradient crossing to the host, every updated working copy crossing back, and the
// CPU's statistics pass and AdamW over every parameter.
double lower_bound_step_s(const OffloadProblem& problem);

// A schedule for the policy that the Simulator accepts and that fits the budget; BudgetError otherwise.
Schedule make_schedule(const OffloadProblem& problem, Policy policy);

// offload.overlap: delayed. The schedule with ZeRO-Offload's delayed parameter update (Schedule::
// delayed_update): each resident bucket's upload moves to right after its last use in the step. Needs a
// policy that runs AdamW on the CPU (std::invalid_argument for resident).
Schedule with_delayed_update(const OffloadProblem& problem, Schedule schedule);

// train.activation_checkpointing: off, on (every block), or auto (only when activations would break the
// budget, then the fewest blocks that make the policy fit, earliest first: theirs live longest).
enum class Checkpointing { Off, On, Auto };
Checkpointing parse_checkpointing(const std::string& name);  // false | true | auto

// SHIM (replaced by the offload branch): the device memory of a plan, laid out once.
struct DeviceMemory {
  std::vector<DeviceTensor> tensors;
  memory::ArenaLayout layout;
  int64_t red_zone_bytes = 0;
};
DeviceMemory lay_out(const OffloadProblem& problem, const Schedule& schedule, int64_t red_zone_bytes = 0);

struct StepPlan {
  OffloadProblem problem;  // with the chosen blocks checkpointed
  Schedule schedule;
  DeviceMemory memory;
};

// The whole decision for one step: which blocks to checkpoint and the policy's schedule. With auto, the
// fewest blocks that make the policy fit; greedy also tries the fewest that make resident or zero-offload
// fit and keeps the fastest. BudgetError, saying what the model needs at least, when nothing fits.
StepPlan plan_step(const models::ModelSpec& spec, const CostModel& cost, int64_t bucket_bytes, int64_t budget,
                   Policy policy, Checkpointing checkpointing, int grad_accum = 1);

}  // namespace ferry::offload
