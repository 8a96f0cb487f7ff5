// The step time no plan can beat, whatever it keeps on the device and wherever AdamW runs: a small linear
// program over how many parameters the device updates, how many stay resident for the CPU to update, and
// how many are streamed.
#pragma once

#include <vector>

#include "offload/problem.h"
#include "offload/schedule.h"

namespace ferry::offload {

// No plan with this overlap beats it (the derivation is at the definition). Tested against an exhaustive
// search of schedules and tiers on small problems.
double lower_bound_step_s(const OffloadProblem& problem, Overlap overlap = Overlap::Backward);

// a x + b y + c.
struct Affine {
  double a = 0, b = 0, c = 0;
  double at(double x, double y) const { return a * x + b * y + c; }
};

// The least, over the points with x >= 0, y >= 0 and every limit's a x + b y + c <= 0, of the largest of
// `terms` (+infinity when no point satisfies the limits). Exact: min z subject to z >= each term is a
// linear program in (x, y, z) whose optimum, when the region is bounded, lies at a vertex, where three of
// its constraints are tight: two limits, a limit and two equal terms, or three equal terms.
double min_of_max(const std::vector<Affine>& terms, const std::vector<Affine>& limits);

}  // namespace ferry::offload
