// plan_step: the step's plan from a PlanRequest: checkpointing (off, on, or the fewest blocks that fit),
// the policy's schedule and its device memory, the overlap rule, budget errors whose advice holds, and the
// config names of the overlap and checkpointing it is asked for.
#include <algorithm>
#include <cmath>
#include <optional>

#include "offload/in_parallel.h"
#include "offload/policies.h"

namespace ferry::offload {
namespace {

// The transformer blocks (op.layer) a spec's activation checkpointing chooses among.
int block_count(const models::ModelSpec& spec) {
  int layers = 0;
  for (const auto& op : spec.ops) layers = std::max(layers, op.layer + 1);
  return layers;
}

// The request's problem with the first k of the spec's `layers` blocks checkpointed.
OffloadProblem checkpointed_problem(const models::ModelSpec& spec, const CostModel& cost, const PlanRequest& request,
                                    int layers, int k) {
  std::vector<bool> checkpointed(layers, false);
  std::fill(checkpointed.begin(), checkpointed.begin() + k, true);
  OffloadProblem p(spec, cost, request.bucket_bytes, request.budget_bytes, checkpointed, request.grad_accum,
                   request.workspace_bytes);
  p.compact_state = request.compact_state;  // no device tier, and its CPU AdamW's rate
  return p;
}

class StepPlanner {
 public:
  StepPlanner(const models::ModelSpec& spec, const CostModel& cost, const PlanRequest& request)
      : spec_(spec), cost_(cost), request_(request), layers_(block_count(spec)) {}

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
    OffloadProblem p = problem(k);
    PlannedSchedule planned =
        make_schedule(p, with, request_.red_zone_bytes, request_.mixed_tiers, request_.overlap, request_.parallel);
    Schedule& s = planned.schedule;
    if (with != request_.policy) s.policy = to_string(request_.policy);  // the construction stays
    // Greedy has weighed the delayed and pipelined updates itself (make_schedule); the others take them
    // where AdamW runs on the CPU.
    if (with != Policy::Greedy && !s.any_device_optimizer()) {
      if (request_.overlap == Overlap::Delayed) s = with_delayed_update(p, std::move(s));
      if (request_.overlap == Overlap::Pipelined) s = with_pipelined_update(std::move(s));
    }
    return StepPlan{std::move(p), std::move(s), std::move(planned.memory), ""};
  }

  OffloadProblem problem(int k) const { return checkpointed_problem(spec_, cost_, request_, layers_, k); }

  // Whether `with` fits with the first k blocks checkpointed. Without greedy's device tier: its candidates add
  // to the others, so whether a plan fits does not depend on it.
  bool fits(Policy with, int k) const {
    return schedule_fits(problem(k), with, request_.red_zone_bytes, false, request_.overlap, request_.parallel);
  }

  // The fewest blocks with which `with` fits: checkpointing more never needs more memory, so bisect.
  std::optional<int> fewest(Policy with) const {
    if (fits(with, 0)) return 0;
    int lo = 1, hi = layers_;
    std::optional<int> found;
    while (lo <= hi) {
      const int mid = (lo + hi) / 2;
      if (fits(with, mid)) found = mid, hi = mid - 1;
      else lo = mid + 1;
    }
    return found;
  }

  StepPlan automatic() const {
    const std::optional<int> least = fewest(request_.policy);
    if (!least) return attempt(request_.policy, layers_);  // throws, saying what every block checkpointed needs
    if (request_.policy != Policy::Greedy) return attempt(request_.policy, *least);
    // Recomputing a few blocks may let everything stay on the device, which can beat any plan that
    // offloads without recomputation: greedy also weighs the fewest blocks with which resident, then
    // zero-offload, fit, and keeps the fastest plan. attempt() throws nothing here: more blocks than
    // the fewest that fit still fit.
    std::vector<int> counts;
    for (Policy anchor : {Policy::Resident, Policy::ZeroOffload}) {
      if (anchor == Policy::Resident && request_.compact_state) continue;  // no plan of this state
      if (const std::optional<int> other = fewest(anchor)) counts.push_back(*other);
    }
    // With the device tier, every block recomputed frees room for more of AdamW on the device, which can
    // save more than the recomputation costs: a few more counts, up to every block.
    if (request_.mixed_tiers)
      for (int quarter = 1; quarter <= 4; ++quarter) counts.push_back(*least + (layers_ - *least) * quarter / 4);
    std::sort(counts.begin(), counts.end());
    counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
    std::erase(counts, *least);
    counts.insert(counts.begin(), *least);
    // Each count planned through the request's ParallelFor; the fastest kept in the order above (the first of equals).
    std::vector<std::pair<StepPlan, double>> plans =
        detail::in_parallel(request_.parallel, counts.size(), [&](size_t i) {
          StepPlan plan = attempt(Policy::Greedy, counts[i]);
          const double step_s = simulate(plan.problem, plan.schedule, plan.memory).step_s;
          return std::pair{std::move(plan), step_s};
        });
    size_t best = 0;
    for (size_t i = 1; i < plans.size(); ++i)
      if (plans[i].second < plans[best].second) best = i;
    return std::move(plans[best].first);
  }

  const models::ModelSpec& spec_;
  const CostModel& cost_;
  const PlanRequest& request_;
  int layers_ = 0;
};

}  // namespace

const char* to_string(Overlap overlap) {
  switch (overlap) {
    case Overlap::Backward: return "backward";
    case Overlap::Delayed: return "delayed";
    case Overlap::Pipelined: return "pipelined";
  }
  return "?";
}

Overlap parse_overlap(const std::string& name) {
  if (name == "backward") return Overlap::Backward;
  if (name == "delayed") return Overlap::Delayed;
  if (name == "pipelined") return Overlap::Pipelined;
  throw std::invalid_argument("offload.overlap: '" + name + "' is not an overlap mode; expected backward, delayed or pipelined");
}

bool overlap_allowed(Policy policy, Overlap overlap) { return overlap == Overlap::Backward || policy != Policy::Resident; }

Checkpointing parse_checkpointing(const std::string& name) {
  if (name == "false") return Checkpointing::Off;
  if (name == "true") return Checkpointing::On;
  if (name == "auto") return Checkpointing::Auto;
  throw std::invalid_argument("train.activation_checkpointing: '" + name + "'; expected auto, true or false");
}

double lower_bound_step_s(const models::ModelSpec& spec, const CostModel& cost, const PlanRequest& request) {
  const int layers = block_count(spec);
  const int first = request.checkpointing == Checkpointing::On ? layers : 0;
  const int last = request.checkpointing == Checkpointing::Off ? 0 : layers;
  double bound = INFINITY;
  for (int k = first; k <= last; ++k)
    bound = std::min(bound, lower_bound_step_s(checkpointed_problem(spec, cost, request, layers, k), request.overlap));
  return bound;
}

StepPlan plan_step(const models::ModelSpec& spec, const CostModel& cost, const PlanRequest& request) {
  if (!overlap_allowed(request.policy, request.overlap))
    throw std::runtime_error(std::string("offload.overlap: ") + to_string(request.overlap) + " needs AdamW on the CPU, and offload.policy: " +
                             to_string(request.policy) + " runs it on the device; set offload.overlap: backward, or a policy "
                             "that offloads (greedy, zero-offload, chunk-lru)");
  StepPlan plan = StepPlanner(spec, cost, request).plan();
  if (request.overlap == Overlap::Delayed && plan.schedule.all_device_optimizer())
    plan.overlap_note = "offload.overlap: delayed is not used: the plan (" + plan.schedule.label() +
                        ") keeps AdamW on the device, where there is no CPU update to delay";
  else if (request.overlap == Overlap::Delayed && !plan.schedule.delayed_update)
    plan.overlap_note = "offload.overlap: delayed is not used: the plan (" + plan.schedule.label() +
                        ") steps faster updating every bucket in the step, where its device tier does not wait for the CPU's pending AdamW";
  else if (request.overlap == Overlap::Pipelined && plan.schedule.all_device_optimizer())
    plan.overlap_note = "offload.overlap: pipelined is not used: the plan (" + plan.schedule.label() +
                        ") keeps AdamW on the device, where no CPU update runs into the next step";
  return plan;
}

}  // namespace ferry::offload
