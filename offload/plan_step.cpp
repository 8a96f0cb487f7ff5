// plan_step: the step's plan from a PlanRequest: checkpointing (off, on, or the fewest blocks that fit),
// the policy's schedule and its device memory, the overlap rule, and budget errors whose advice holds.
#include <algorithm>
#include <optional>

#include "offload/policies.h"

namespace ferry::offload {
namespace {

class StepPlanner {
 public:
  StepPlanner(const models::ModelSpec& spec, const CostModel& cost, const PlanRequest& request)
      : spec_(spec), cost_(cost), request_(request) {
    for (const auto& op : spec.ops) layers_ = std::max(layers_, op.layer + 1);
  }

  StepPlan plan() {
    if (request_.checkpointing == Checkpointing::Auto) return automatic();
    try {
      return attempt(request_.policy, request_.checkpointing == Checkpointing::On ? layers_ : 0);
    } catch (const BudgetError& e) {
      if (!e.shortfall.suggest_checkpointing) throw;
      BudgetShortfall need = e.shortfall;  // advise recomputation only where it makes the policy fit
      need.suggest_checkpointing = fits(request_.policy, layers_);
      throw BudgetError(need);
    }
  }

 private:
  // The plan of `with` (labelled with the requested policy) with the first k blocks checkpointed and the
  // delayed update applied where asked for and AdamW runs on the CPU. BudgetError when it does not fit.
  StepPlan attempt(Policy with, int k) const {
    std::vector<bool> checkpointed(layers_, false);
    std::fill(checkpointed.begin(), checkpointed.begin() + k, true);
    OffloadProblem p(spec_, cost_, request_.bucket_bytes, request_.budget_bytes, checkpointed, request_.grad_accum,
                     request_.workspace_bytes);
    PlannedSchedule planned = make_schedule(p, with, request_.red_zone_bytes);
    Schedule& s = planned.schedule;
    if (with != request_.policy) s.policy = to_string(request_.policy);  // the construction stays
    if (request_.overlap == Overlap::Delayed && !s.optimizer_on_device) s = with_delayed_update(p, std::move(s));
    return StepPlan{std::move(p), std::move(s), std::move(planned.memory), ""};
  }

  bool fits(Policy with, int k) const {
    try {
      attempt(with, k);
      return true;
    } catch (const BudgetError&) {
      return false;
    }
  }

  // The fewest blocks with which `with` fits: checkpointing more never needs more memory, so bisect.
  std::optional<StepPlan> fewest(Policy with) const {
    try {
      return attempt(with, 0);
    } catch (const BudgetError&) {
    }
    int lo = 1, hi = layers_;
    std::optional<StepPlan> found;
    while (lo <= hi) {
      const int mid = (lo + hi) / 2;
      try {
        found.emplace(attempt(with, mid));
        hi = mid - 1;
      } catch (const BudgetError&) {
        lo = mid + 1;
      }
    }
    return found;
  }

  StepPlan automatic() const {
    std::optional<StepPlan> best = fewest(request_.policy);
    if (!best) return attempt(request_.policy, layers_);  // throws, saying what every block checkpointed needs
    if (request_.policy != Policy::Greedy) return std::move(*best);
    // Recomputing a few blocks may let everything stay on the device, which can beat any plan that
    // offloads without recomputation: greedy also weighs the fewest blocks with which resident, then
    // zero-offload, fit, and keeps the fastest plan.
    double best_s = simulate(best->problem, best->schedule, best->memory).step_s;
    for (Policy anchor : {Policy::Resident, Policy::ZeroOffload}) {
      const std::optional<StepPlan> other = fewest(anchor);
      if (!other || other->problem.checkpointed_layers == best->problem.checkpointed_layers) continue;
      StepPlan candidate = attempt(Policy::Greedy, other->problem.checkpointed_layers);
      const double s = simulate(candidate.problem, candidate.schedule, candidate.memory).step_s;
      if (s < best_s) best_s = s, best.emplace(std::move(candidate));
    }
    return std::move(*best);
  }

  const models::ModelSpec& spec_;
  const CostModel& cost_;
  const PlanRequest& request_;
  int layers_ = 0;
};

}  // namespace

const char* to_string(Overlap overlap) { return overlap == Overlap::Delayed ? "delayed" : "backward"; }

Overlap parse_overlap(const std::string& name) {
  if (name == "backward") return Overlap::Backward;
  if (name == "delayed") return Overlap::Delayed;
  throw std::invalid_argument("offload.overlap: '" + name + "' is not an overlap mode; expected backward or delayed");
}

bool overlap_allowed(Policy policy, Overlap overlap) { return !(overlap == Overlap::Delayed && policy == Policy::Resident); }

StepPlan plan_step(const models::ModelSpec& spec, const CostModel& cost, const PlanRequest& request) {
  if (!overlap_allowed(request.policy, request.overlap))
    throw std::runtime_error(std::string("offload.overlap: delayed needs AdamW on the CPU, and offload.policy: ") +
                             to_string(request.policy) + " runs it on the device; set offload.overlap: backward, or a policy "
                             "that offloads (greedy, zero-offload, chunk-lru)");
  StepPlan plan = StepPlanner(spec, cost, request).plan();
  if (request.overlap == Overlap::Delayed && plan.schedule.optimizer_on_device)
    plan.overlap_note = "offload.overlap: delayed is not used: the plan (" + plan.schedule.label() +
                        ") keeps AdamW on the device, where there is no CPU update to delay";
  return plan;
}

}  // namespace ferry::offload
