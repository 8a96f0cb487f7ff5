// The placement policies: resident (no offload), zero-offload (ZeRO-Offload's placement), chunk-lru
// (Gemini-like on-demand fetch with LRU eviction) and greedy (Ferry's), and plan_step, the whole decision
// for one step. Each policy turns an OffloadProblem into a Schedule and its one DeviceMemory layout that
// fit the budget, or fails saying how much memory it needs and what would make it fit.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "memory/bucket_layout.h"
#include "offload/budget.h"
#include "offload/device_memory.h"
#include "offload/lower_bound.h"
#include "offload/parallel_for.h"
#include "offload/problem.h"
#include "offload/schedule.h"
#include "offload/simulator.h"

namespace ferry::offload {

enum class Policy { Resident, ZeroOffload, ChunkLru, Greedy };
const char* to_string(Policy policy);
Policy parse_policy(const std::string& name);  // resident | zero-offload | chunk-lru | greedy
const std::vector<Policy>& all_policies();

// What a schedule keeps in each tier (indexed by Tier): parameters and the bytes of their working copies.
struct TierTotals {
  int64_t params[3] = {0, 0, 0};
  int64_t bytes[3] = {0, 0, 0};
};
TierTotals tier_totals(const OffloadProblem& problem, const Schedule& schedule);

// What every policy that runs AdamW on the CPU adds to its schedule: each bucket's gradients leave for the
// host right after the last op writing them, with its CpuAdam; their buffer is released once the copy has
// had time to finish behind the copies queued before it (by the cost model, on the ideal timeline);
// resident buckets are uploaded after the last op, in the order the CPU updates them. Returns the bytes of
// gradient buffers alive at each op.
std::vector<int64_t> add_cpu_optimizer(const OffloadProblem& problem, Schedule& schedule);

// A policy's schedule with its device memory, laid out once: the layout its fit was judged by.
struct PlannedSchedule {
  Schedule schedule;
  DeviceMemory memory;
};

// A schedule for the policy that the Simulator accepts and that fits the budget with every device tensor
// padded by red_zone_bytes; BudgetError otherwise. mixed_tiers: greedy may update some buckets on the
// device and the others on the CPU in one step (Tier); without, AdamW runs on one side for every bucket.
// overlap: with delayed, greedy weighs each candidate delayed and updated in the step, and returns the
// faster (Schedule::delayed_update says which); the other policies' schedules are returned without it.
// parallel: how greedy spreads its candidates (a loop when empty; the same schedule either way).
PlannedSchedule make_schedule(const OffloadProblem& problem, Policy policy, int64_t red_zone_bytes = 0,
                              bool mixed_tiers = true, Overlap overlap = Overlap::Backward,
                              const ParallelFor& parallel = {});

// Whether make_schedule finds a schedule that fits (BudgetError otherwise), found sooner: greedy stops at the
// first candidate that fits.
bool schedule_fits(const OffloadProblem& problem, Policy policy, int64_t red_zone_bytes, bool mixed_tiers,
                   Overlap overlap, const ParallelFor& parallel = {});

// The one rule on which overlap a policy allows: delayed and pipelined need AdamW on the CPU, which
// resident never runs there. (Greedy may still choose to update every bucket in the step: plan_step then says why in a note.)
bool overlap_allowed(Policy policy, Overlap overlap);

// The schedule with ZeRO-Offload's delayed parameter update (Schedule::delayed_update) for the buckets the
// CPU updates: each weights-resident bucket's upload moves to right after its last use in the step. The
// device tier, if any, is still updated in the step, after the decision. Uploads are not device tensors, so
// the schedule's DeviceMemory stays valid. Needs AdamW on the CPU for some bucket (std::invalid_argument
// otherwise).
Schedule with_delayed_update(const OffloadProblem& problem, Schedule schedule);

// The schedule with the pipelined update (Schedule::pipelined_update): the CPU's AdamW and the uploads it
// feeds run on into the next step. The actions stay; the Simulator and the Executor order the next step's
// uses after them. Needs AdamW on the CPU for some bucket (std::invalid_argument otherwise).
Schedule with_pipelined_update(Schedule schedule);

// train.activation_checkpointing: off, on (every block), or auto (only when activations would break the
// budget, then the fewest blocks that make the policy fit, earliest first: theirs live longest).
enum class Checkpointing { Off, On, Auto };
Checkpointing parse_checkpointing(const std::string& name);  // false | true | auto

// What plan_step is asked for; the config keys in brackets.
struct PlanRequest {
  int64_t bucket_bytes = memory::BucketLayout::kDefaultBucketBytes;  // [offload.bucket_mb]
  int64_t budget_bytes = 0;                                          // [offload.gpu_budget]
  Policy policy = Policy::Greedy;                                    // [offload.policy]
  Checkpointing checkpointing = Checkpointing::Off;                  // [train.activation_checkpointing]
  int grad_accum = 1;                                                // [train.grad_accum]
  Overlap overlap = Overlap::Backward;                               // [offload.overlap]
  // Scratch the device's libraries need while an op runs: cuBLASLt, cuDNN, CUB; oneDNN's scratchpad on
  // the host device; sized by the device. One device tensor alive the whole step; counts against the budget.
  int64_t workspace_bytes = 0;
  int64_t red_zone_bytes = 0;  // padding after every device tensor, for canaries (tests); counts against the budget
  // Greedy may put some buckets in the device tier and the rest on the CPU (make_schedule); with overlap
  // delayed, the device tier is updated in the step and the CPU's buckets one step behind.
  bool mixed_tiers = true;
  bool compact_state = false;  // [optim.state: compact] OffloadProblem::compact_state
  // How plan_step spreads its independent work (the checkpointing counts it weighs, greedy's candidates): a
  // loop when empty; the engine passes oneTBB's (engine/parallel_planning.h). The plan is the same either way.
  ParallelFor parallel;
};

struct StepPlan {
  OffloadProblem problem;  // with the chosen blocks checkpointed
  Schedule schedule;       // with the delayed update when asked for and AdamW runs on the CPU
  DeviceMemory memory;     // the one layout of the schedule's device tensors: the arena's size and every offset
  std::string overlap_note;  // why the requested overlap is not used; empty when it is
};

// lower_bound_step_s over the checkpointing the request allows (off: none; on: every block; auto: every
// count of blocks plan_step may choose, earliest first), under its budget, accumulation and overlap: no
// plan plan_step can make for the request beats it.
double lower_bound_step_s(const models::ModelSpec& spec, const CostModel& cost, const PlanRequest& request);

// The whole decision for one step: which blocks to checkpoint, the policy's schedule, the overlap and
// the device memory. With auto, the fewest blocks that make the policy fit; greedy also tries the fewest
// that make resident or zero-offload fit and keeps the fastest. BudgetError when nothing fits;
// std::runtime_error, naming both keys, when the policy does not allow the overlap (overlap_allowed).
StepPlan plan_step(const models::ModelSpec& spec, const CostModel& cost, const PlanRequest& request);

}  // namespace ferry::offload
