// The policies by name, make_schedule (the construction each one runs), and what every construction shares:
// an empty schedule, the ideal timeline, a candidate laid out and simulated once.
#include "offload/policies.h"

#include <stdexcept>

#include "offload/policy_parts.h"

namespace ferry::offload {
namespace detail {

Schedule empty_schedule(const OffloadProblem& p, Policy policy, std::string construction) {
  Schedule s;
  s.policy = to_string(policy);
  s.construction = std::move(construction);
  s.before.resize(p.n_ops + 1);
  s.resident.assign(p.n_buckets, false);
  s.device_optimizer.assign(p.n_buckets, false);
  return s;
}

std::vector<double> timeline(const OffloadProblem& p) {
  std::vector<double> t(p.n_ops + 1, 0.0);
  for (int i = 0; i < p.n_ops; ++i) t[i + 1] = t[i] + p.op_seconds[i];
  return t;
}

Candidate evaluate(const OffloadProblem& p, Schedule s, int64_t red_zone_bytes) {
  DeviceMemory memory = lay_out(p, s, red_zone_bytes);
  SimResult r = simulate(p, s, memory);
  if (!r.error.empty()) throw std::logic_error(s.label() + ": invalid schedule: " + r.error);
  return {{std::move(s), std::move(memory)}, std::move(r)};
}

}  // namespace detail

const char* to_string(Policy policy) {
  switch (policy) {
    case Policy::Resident: return "resident";
    case Policy::ZeroOffload: return "zero-offload";
    case Policy::ChunkLru: return "chunk-lru";
    case Policy::Greedy: return "greedy";
  }
  return "?";
}

Policy parse_policy(const std::string& name) {
  for (Policy p : all_policies())
    if (name == to_string(p)) return p;
  throw std::invalid_argument("offload.policy: '" + name + "' is not a policy; expected resident, zero-offload, chunk-lru or greedy");
}

const std::vector<Policy>& all_policies() {
  static const std::vector<Policy> all{Policy::Resident, Policy::ZeroOffload, Policy::ChunkLru, Policy::Greedy};
  return all;
}

TierTotals tier_totals(const OffloadProblem& p, const Schedule& s) {
  TierTotals t;
  for (int b = 0; b < p.n_buckets; ++b) {
    const int tier = static_cast<int>(s.tier(b));
    t.params[tier] += p.bucket_params[b], t.bytes[tier] += p.bucket_bytes[b];
  }
  return t;
}

PlannedSchedule make_schedule(const OffloadProblem& p, Policy policy, int64_t red_zone_bytes, bool mixed_tiers,
                              Overlap overlap, const ParallelFor& parallel) {
  if (const int64_t least = minimum_device_bytes(p); least > p.budget_bytes)
    throw BudgetError(detail::shortfall(p, least, "this model", "with every bucket offloaded"));
  switch (policy) {
    case Policy::Resident:
      if (p.compact_state)
        throw std::invalid_argument(
            "offload.policy: resident runs AdamW on the device, and optim.state: compact keeps the optimizer "
            "state on the host for the CPU's AdamW; use greedy, zero-offload or chunk-lru");
      return detail::fixed(p, detail::resident(p), red_zone_bytes, "with every bucket and AdamW's state on the device");
    case Policy::ZeroOffload:
      return detail::fixed(p, detail::zero_offload(p), red_zone_bytes, "with every bucket's weights on the device");
    case Policy::ChunkLru: return detail::chunk_lru_fitting(p, red_zone_bytes);
    case Policy::Greedy: return detail::greedy(p, red_zone_bytes, mixed_tiers, overlap, parallel);
  }
  throw std::logic_error("unknown policy");
}

bool schedule_fits(const OffloadProblem& p, Policy policy, int64_t red_zone_bytes, bool mixed_tiers, Overlap overlap,
                   const ParallelFor& parallel) {
  if (policy == Policy::Greedy) return detail::greedy_fits(p, red_zone_bytes, mixed_tiers, overlap, parallel);
  // A fixed placement whose most bytes alive at once exceed the budget fits in no layout: not laid out.
  const bool fixed = (policy == Policy::Resident && !p.compact_state) || policy == Policy::ZeroOffload;
  if (fixed && minimum_device_bytes(p) <= p.budget_bytes &&
      !estimate(p, policy == Policy::Resident ? detail::resident(p) : detail::zero_offload(p)).fits)
    return false;
  try {
    make_schedule(p, policy, red_zone_bytes, mixed_tiers, overlap, parallel);
    return true;
  } catch (const BudgetError&) {
    return false;
  }
}

}  // namespace ferry::offload
