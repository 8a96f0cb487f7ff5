// The baselines inside Ferry: resident (no offload), zero-offload (ZeRO-Offload's placement) and chunk-lru
// (Gemini-like on-demand fetch with LRU eviction), on Ferry's kernels so that a comparison isolates the
// scheduling.
#include <algorithm>

#include "offload/policy_parts.h"

namespace ferry::offload::detail {

Schedule resident(const OffloadProblem& p) {
  Schedule s = empty_schedule(p, Policy::Resident, "resident schedule");
  s.resident.assign(p.n_buckets, true);
  s.device_optimizer.assign(p.n_buckets, true);
  s.before[p.n_ops].push_back({Action::Kind::DeviceAdam, -1});
  return s;
}

Schedule zero_offload(const OffloadProblem& p) {
  Schedule s = empty_schedule(p, Policy::ZeroOffload, "zero-offload schedule");
  s.resident.assign(p.n_buckets, true);
  add_cpu_optimizer(p, s);
  return s;
}

// Nothing resident; no lookahead.
Schedule chunk_lru(const OffloadProblem& p, int64_t budget) {
  Schedule s = empty_schedule(p, Policy::ChunkLru, "chunk-lru schedule");
  const std::vector<int64_t> grads_live = add_cpu_optimizer(p, s);
  std::vector<int> last_used(p.n_buckets, -1);
  std::vector<bool> on(p.n_buckets, false);
  int64_t held = 0;
  auto lru_victim = [&](int op) {
    int victim = -1;
    for (int c = 0; c < p.n_buckets; ++c) {
      const bool needed = std::find(p.op_buckets[op].begin(), p.op_buckets[op].end(), c) != p.op_buckets[op].end();
      if (on[c] && !needed && (victim < 0 || last_used[c] < last_used[victim])) victim = c;
    }
    return victim;
  };
  for (int i = 0; i < p.n_ops; ++i) {
    for (int b : p.op_buckets[i]) {
      last_used[b] = i;
      if (on[b]) continue;
      while (p.workspace_bytes + p.activation_live[i] + grads_live[i] + held + p.bucket_bytes[b] > budget) {
        const int victim = lru_victim(i);
        if (victim < 0) break;  // nothing left to evict: the Simulator's budget check reports it
        s.before[i].push_back({Action::Kind::Release, victim});
        on[victim] = false;
        held -= p.bucket_bytes[victim];
      }
      s.before[i].push_back({Action::Kind::Prefetch, b});
      s.before[i].push_back({Action::Kind::Wait, b});
      on[b] = true;
      held += p.bucket_bytes[b];
    }
  }
  return s;
}

PlannedSchedule fixed(const OffloadProblem& p, Schedule s, int64_t red_zone_bytes, const std::string& placement) {
  Candidate c = evaluate(p, std::move(s), red_zone_bytes);
  if (c.result.fits) return std::move(c.plan);
  BudgetShortfall need = shortfall(p, c.result.peak_device_bytes, "policy " + c.plan.schedule.policy, placement);
  need.suggest_greedy = minimum_device_bytes(p) <= p.budget_bytes;
  throw BudgetError(need);
}

PlannedSchedule chunk_lru_fitting(const OffloadProblem& p, int64_t red_zone_bytes) {
  constexpr double kMargins[] = {0.0, 0.02, 0.05, 0.1, 0.2};
  auto built_for = [&](double margin) { return chunk_lru(p, static_cast<int64_t>(p.budget_bytes * (1 - margin))); };
  // Laid out only where the most bytes alive at once, which no layout beats, fit the budget.
  for (double margin : kMargins) {
    Schedule s = built_for(margin);
    if (!estimate(p, s).fits) continue;
    Candidate c = evaluate(p, std::move(s), red_zone_bytes);
    if (c.result.fits) return std::move(c.plan);
  }
  int64_t smallest = INT64_MAX;  // none fits: every layout, for the error's figure
  for (double margin : kMargins)
    smallest = std::min(smallest, evaluate(p, built_for(margin), red_zone_bytes).result.peak_device_bytes);
  BudgetShortfall need = shortfall(p, smallest, "policy chunk-lru", "with each bucket fetched on demand");
  need.suggest_greedy = true;
  throw BudgetError(need);
}

}  // namespace ferry::offload::detail
