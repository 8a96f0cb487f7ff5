// What the policies' own files share (internal to offload/): an empty schedule of a policy, the ideal
// compute timeline, a shortfall of the problem's budget, a schedule laid out and simulated once, and each
// policy's construction, which make_schedule (policies.cpp) picks by name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "offload/policies.h"

namespace ferry::offload::detail {

Schedule empty_schedule(const OffloadProblem& p, Policy policy, std::string construction);

// Ideal compute timeline: when op i would start with no stalls.
std::vector<double> timeline(const OffloadProblem& p);

// A shortfall of the problem's budget; recomputing more blocks is suggested while any is left.
BudgetShortfall shortfall(const OffloadProblem& p, int64_t needed, std::string needed_by, std::string placement);

// A schedule laid out once and simulated on that layout.
struct Candidate {
  PlannedSchedule plan;
  SimResult result;
};
Candidate evaluate(const OffloadProblem& p, Schedule s, int64_t red_zone_bytes);

// The baselines (baselines.cpp). resident: every bucket and AdamW's state on the device; zero-offload:
// every bucket's weights on the device, AdamW on the CPU; chunk-lru: Gemini-like, each op fetching what it
// lacks right before it runs and evicting the least recently used buckets while `budget` is short.
Schedule resident(const OffloadProblem& p);
Schedule zero_offload(const OffloadProblem& p);
Schedule chunk_lru(const OffloadProblem& p, int64_t budget);
// resident and zero-offload: one fixed construction, which fits or not (BudgetError naming `placement`).
PlannedSchedule fixed(const OffloadProblem& p, Schedule s, int64_t red_zone_bytes, const std::string& placement);
// chunk-lru, built for budgets a little below the real one, so that the Planner's layout (which may need
// a little more than the sum of what is alive) still fits.
PlannedSchedule chunk_lru_fitting(const OffloadProblem& p, int64_t red_zone_bytes);

// Ferry's policy (greedy.cpp): the fastest plan the Simulator predicts that fits the budget, over the three
// tiers; BudgetError when none does.
PlannedSchedule greedy(const OffloadProblem& p, int64_t red_zone_bytes, bool mixed_tiers, Overlap overlap,
                       const ParallelFor& parallel);
// Whether greedy finds a plan that fits, without searching on once one does.
bool greedy_fits(const OffloadProblem& p, int64_t red_zone_bytes, bool mixed_tiers, Overlap overlap,
                 const ParallelFor& parallel);

}  // namespace ferry::offload::detail
