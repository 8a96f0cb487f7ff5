// The policies. Shared by all that run AdamW on the CPU: each bucket's gradients leave for the host right
// after the last op writing them; their device buffer is released once the copy has had time to finish
// (by the cost model), and AdamW runs on the bucket as soon as they land.
#include "offload/policies.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "memory/host_buffer.h"

namespace ferry::offload {
namespace {

Schedule empty_schedule(const OffloadProblem& p, Policy policy) {
  Schedule s;
  s.policy = to_string(policy);
  s.before.resize(p.n_ops + 1);
  s.resident.assign(p.n_buckets, false);
  return s;
}

// Ideal compute timeline: when op i would start with no stalls.
std::vector<double> timeline(const OffloadProblem& p) {
  std::vector<double> t(p.n_ops + 1, 0.0);
  for (int i = 0; i < p.n_ops; ++i) t[i + 1] = t[i] + p.op_seconds[i];
  return t;
}

// Gradients to the host, AdamW on the CPU, uploads of resident buckets at the end. Returns the bytes of
// gradient buffers alive at each op.
std::vector<int64_t> add_cpu_optimizer(const OffloadProblem& p, Schedule& s) {
  const auto t = timeline(p);
  std::vector<int64_t> grads_live(p.n_ops, 0);
  for (int b = 0; b < p.n_buckets; ++b) {
    if (p.first_grad_op[b] < 0) continue;
    const int out = p.last_grad_op[b] + 1;
    s.before[out].push_back({Action::Kind::OffloadGrads, b});
    s.before[out].push_back({Action::Kind::CpuAdam, b});
    int release = out;
    while (release < p.n_ops && t[release] - t[out] < p.cost.d2h.seconds(p.bucket_bytes[b])) ++release;
    release = std::min(p.n_ops, release + 1);
    s.before[release].push_back({Action::Kind::ReleaseGrads, b});
    for (int i = p.first_grad_op[b]; i < release && i < p.n_ops; ++i) grads_live[i] += p.bucket_bytes[b];
    if (s.resident[b]) s.before[p.n_ops].push_back({Action::Kind::Upload, b});
  }
  return grads_live;
}

void check_fits(const OffloadProblem& p, const Schedule& s, const SimResult& r) {
  if (!r.error.empty()) throw std::logic_error(s.policy + ": invalid schedule: " + r.error);
  if (!r.fits)
    throw BudgetError(s.policy + ": needs " + memory::format_bytes(r.peak_device_bytes) + " of device memory; the budget is " +
                      memory::format_bytes(p.budget_bytes));
}

Schedule resident(const OffloadProblem& p) {
  Schedule s = empty_schedule(p, Policy::Resident);
  s.resident.assign(p.n_buckets, true);
  s.optimizer_on_device = true;
  s.before[p.n_ops].push_back({Action::Kind::DeviceAdam, -1});
  return s;
}

Schedule zero_offload(const OffloadProblem& p) {
  Schedule s = empty_schedule(p, Policy::ZeroOffload);
  s.resident.assign(p.n_buckets, true);
  add_cpu_optimizer(p, s);
  return s;
}

// Gemini-like: nothing resident; each op fetches what it lacks right before it runs (no lookahead) and
// evicts the least recently used buckets while the budget is short.
Schedule chunk_lru(const OffloadProblem& p, int64_t budget) {
  Schedule s = empty_schedule(p, Policy::ChunkLru);
  const std::vector<int64_t> grads_live = add_cpu_optimizer(p, s);
  std::vector<int> last_used(p.n_buckets, -1);
  std::vector<bool> on(p.n_buckets, false);
  int64_t held = 0;
  for (int i = 0; i < p.n_ops; ++i) {
    for (int b : p.op_buckets[i]) {
      last_used[b] = i;
      if (on[b]) continue;
      while (p.activation_live[i] + grads_live[i] + held + p.bucket_bytes[b] > budget) {
        int victim = -1;
        for (int c = 0; c < p.n_buckets; ++c) {
          const bool needed = std::find(p.op_buckets[i].begin(), p.op_buckets[i].end(), c) != p.op_buckets[i].end();
          if (on[c] && !needed && (victim < 0 || last_used[c] < last_used[victim])) victim = c;
        }
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

// Ferry's schedule for a given resident set: every other bucket travels once per window of uses (uses
// at most kWindowGap ops apart), prefetched just in time on the ideal timeline (its copy, queued behind
// the ones before it, lands when the window's first op would start), earlier only if memory forbids the
// just-in-time point, and released right after the window's last use.
Schedule greedy_for(const OffloadProblem& p, const std::vector<bool>& resident, int64_t budget) {
  constexpr int kWindowGap = 4;
  Schedule s = empty_schedule(p, Policy::Greedy);
  s.resident = resident;
  const std::vector<int64_t> grads_live = add_cpu_optimizer(p, s);
  const auto t = timeline(p);
  int64_t resident_bytes = 0;
  for (int b = 0; b < p.n_buckets; ++b)
    if (resident[b]) resident_bytes += p.bucket_bytes[b];
  std::vector<int64_t> used(p.n_ops);
  for (int i = 0; i < p.n_ops; ++i) used[i] = p.activation_live[i] + grads_live[i] + resident_bytes;

  struct Window {
    int bucket, first, last;
  };
  std::vector<Window> windows;
  std::vector<int> open(p.n_buckets, -1);
  for (int i = 0; i < p.n_ops; ++i)
    for (int b : p.op_buckets[i]) {
      if (resident[b]) continue;
      if (open[b] >= 0 && i - windows[open[b]].last <= kWindowGap) {
        windows[open[b]].last = i;
      } else {
        open[b] = static_cast<int>(windows.size());
        windows.push_back({b, i, i});
      }
    }
  std::vector<int> released_at(p.n_buckets, 0);  // a bucket's next window may not start before this point
  double h2d_free = 0;
  for (const Window& w : windows) {  // in order of first use
    const int64_t bytes = p.bucket_bytes[w.bucket];
    const double copy = p.cost.h2d.seconds(bytes);
    auto fits_from = [&](int point) {
      for (int i = point; i <= w.last; ++i)
        if (used[i] + bytes > budget) return false;
      return true;
    };
    // Latest point whose copy still lands in time, then back off to memory, then forward to the earliest
    // point memory allows.
    int point = w.first;
    while (point > released_at[w.bucket] && std::max(t[point], h2d_free) + copy > t[w.first]) --point;
    while (point < w.first && !fits_from(point)) ++point;
    h2d_free = std::max(t[point], h2d_free) + copy;
    s.before[point].push_back({Action::Kind::Prefetch, w.bucket});
    s.before[w.first].push_back({Action::Kind::Wait, w.bucket});
    s.before[w.last + 1].push_back({Action::Kind::Release, w.bucket});
    released_at[w.bucket] = w.last + 1;
    for (int i = point; i <= w.last; ++i) used[i] += bytes;
  }
  // Within a point: weight releases first (they free room), then everything else in the order it was
  // added (a bucket's gradient release follows its offload), then waits.
  for (auto& actions : s.before)
    std::stable_sort(actions.begin(), actions.end(), [](const Action& a, const Action& b) {
      auto rank = [](Action::Kind k) { return k == Action::Kind::Release ? 0 : k == Action::Kind::Wait ? 2 : 1; };
      return rank(a.kind) < rank(b.kind);
    });
  return s;
}

// Tries a policy's construction at budgets a little below the real one, so that the Planner's layout
// (which may need a little more than the sum of what is alive) still fits.
template <class Build>
Schedule fitting(const OffloadProblem& p, Build&& build) {
  std::string last_error;
  for (double margin : {0.0, 0.02, 0.05, 0.1, 0.2}) {
    Schedule s = build(static_cast<int64_t>(p.budget_bytes * (1 - margin)));
    const SimResult r = simulate(p, s);
    if (!r.error.empty()) throw std::logic_error(s.policy + ": invalid schedule: " + r.error);
    if (r.fits) return s;
    last_error = s.policy + ": needs " + memory::format_bytes(r.peak_device_bytes) + " of device memory; the budget is " + memory::format_bytes(p.budget_bytes);
  }
  throw BudgetError(last_error);
}

// Ferry's policy.
// What it optimises: the Simulator's predicted step time, under the budget.
// The greedy criterion: every bucket starts offloaded and scheduled just in time (greedy_for). Buckets are
// ranked once by what residency saves per byte they would occupy: the copy time of all their trips plus
// the compute stalls charged to their windows in the all-offloaded schedule. The resident set is then a
// prefix of that ranking (most valuable first); greedy builds the plan of each prefix (at most
// kPrefixes of them, evenly spaced) for unlimited memory and for each budget of a fixed ladder (the
// minimum the model needs times 1.25^j), and keeps the fastest plan whose Planner peak fits the budget.
// The plans of resident, zero-offload and chunk-lru are candidates too, so greedy is never predicted
// slower than those where they fit.
// Every other candidate is built without looking at the budget (ladder budgets above it are simply not built:
// their plans could not be used anyway), so a larger budget only adds candidates: more budget never gives
// a slower plan.
// Complexity: (prefixes x ladder rungs up to the budget) simulations, each O(ops + actions) plus one
// Planner run; at most 24 x log_1.25(budget / minimum) of them.
Schedule greedy(const OffloadProblem& p) {
  constexpr int kPrefixes = 24;
  constexpr double kRung = 1.25;
  Schedule best;
  double best_time = INFINITY;
  auto consider = [&](Schedule s) {
    const SimResult r = simulate(p, s);
    if (r.error.empty() && r.fits && r.step_s < best_time) best_time = r.step_s, best = std::move(s);
  };
  std::vector<int64_t> ladder{INT64_MAX / 4};  // unlimited memory first
  for (double rung = double(minimum_device_bytes(p)); rung <= double(p.budget_bytes); rung *= kRung)
    ladder.push_back(static_cast<int64_t>(rung));
  for (Policy baseline : {Policy::Resident, Policy::ZeroOffload}) {
    Schedule s = baseline == Policy::Resident ? resident(p) : zero_offload(p);
    s.policy = to_string(Policy::Greedy);
    consider(std::move(s));
  }
  // chunk-lru at the budget itself: LRU is a stack algorithm (more room never means more fetches), so
  // this candidate keeps the monotonicity.
  for (int64_t budget : {p.budget_bytes, static_cast<int64_t>(p.budget_bytes * 0.95)}) {
    Schedule s = chunk_lru(p, budget);
    s.policy = to_string(Policy::Greedy);
    consider(std::move(s));
  }
  // Rank the buckets on the all-offloaded plan with unlimited memory.
  const Schedule offloaded = greedy_for(p, std::vector<bool>(p.n_buckets, false), ladder[0]);
  const SimResult base = simulate(p, offloaded);
  std::vector<double> value(p.n_buckets, 0.0);
  for (int point = 0; point < p.n_ops; ++point) {
    for (const Action& a : offloaded.before[point])
      if (a.kind == Action::Kind::Prefetch) value[a.bucket] += p.cost.h2d.seconds(p.bucket_bytes[a.bucket]);
    for (int b : p.op_buckets[point]) value[b] += base.stall_before_op[point];
  }
  std::vector<int> ranking(p.n_buckets);
  std::iota(ranking.begin(), ranking.end(), 0);
  std::stable_sort(ranking.begin(), ranking.end(), [&](int a, int b) {
    return value[a] / double(p.bucket_bytes[a]) > value[b] / double(p.bucket_bytes[b]);
  });
  int64_t most_activations = 0;
  for (int64_t a : p.activation_live) most_activations = std::max(most_activations, a);
  const int prefixes = std::min(p.n_buckets, kPrefixes);
  for (int k = 0; k <= prefixes; ++k) {
    const int size = static_cast<int>(int64_t(k) * p.n_buckets / std::max(1, prefixes));
    std::vector<bool> resident_set(p.n_buckets, false);
    int64_t resident_bytes = 0;
    for (int i = 0; i < size; ++i) resident_set[ranking[i]] = true, resident_bytes += p.bucket_bytes[ranking[i]];
    if (resident_bytes + most_activations > p.budget_bytes) break;  // neither this prefix nor a larger one fits
    for (int64_t rung : ladder) consider(greedy_for(p, resident_set, rung));
  }
  if (best_time == INFINITY)
    throw BudgetError("greedy: needs at least " + memory::format_bytes(minimum_device_bytes(p)) + " with every bucket offloaded and " +
                      std::to_string(p.checkpointed_layers) + " block(s) checkpointed; the budget is " +
                      memory::format_bytes(p.budget_bytes));
  return best;
}

}  // namespace

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

int64_t minimum_device_bytes(const OffloadProblem& p) {
  int64_t need = 0;
  for (int i = 0; i < p.n_ops; ++i) {
    int64_t at = p.activation_live[i];
    for (int b : p.op_buckets[i]) at += p.bucket_bytes[b] * (p.first_grad_op[b] >= 0 && i >= p.first_grad_op[b] ? 2 : 1);
    need = std::max(need, at);
  }
  return need;
}

Checkpointing parse_checkpointing(const std::string& name) {
  if (name == "false") return Checkpointing::Off;
  if (name == "true") return Checkpointing::On;
  if (name == "auto") return Checkpointing::Auto;
  throw std::invalid_argument("train.activation_checkpointing: '" + name + "'; expected auto, true or false");
}

StepPlan plan_step(const models::ModelSpec& spec, const CostModel& cost, int64_t bucket_bytes, int64_t budget,
                   Policy policy, Checkpointing checkpointing, int grad_accum) {
  int layers = 0;
  for (const auto& op : spec.ops) layers = std::max(layers, op.layer + 1);
  auto first_k = [&](int k) {
    std::vector<bool> c(layers, false);
    std::fill(c.begin(), c.begin() + k, true);
    return c;
  };
  auto attempt = [&](Policy with, int k) {
    OffloadProblem p(spec, cost, bucket_bytes, budget, first_k(k), grad_accum);
    Schedule s = make_schedule(p, with);
    if (with != policy) s.policy = to_string(policy);
    DeviceMemory mem = lay_out(p, s);
    return StepPlan{std::move(p), std::move(s), std::move(mem)};
  };
  if (checkpointing != Checkpointing::Auto) return attempt(policy, checkpointing == Checkpointing::On ? layers : 0);
  // The fewest blocks with which `with` fits: checkpointing more never needs more memory, so bisect.
  auto fewest = [&](Policy with) -> std::optional<StepPlan> {
    try {
      return attempt(with, 0);
    } catch (const BudgetError&) {
    }
    int lo = 1, hi = layers;
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
  };
  std::optional<StepPlan> best = fewest(policy);
  if (!best) return attempt(policy, layers);  // throws, saying what the model needs with every block checkpointed
  if (policy == Policy::Greedy) {
    // Recomputing a few blocks may let everything stay on the device, which can beat any plan that
    // offloads without recomputation: greedy also weighs the fewest blocks with which resident, then
    // zero-offload, fit, and keeps the fastest plan.
    double best_s = simulate(best->problem, best->schedule).step_s;
    for (Policy anchor : {Policy::Resident, Policy::ZeroOffload}) {
      const std::optional<StepPlan> other = fewest(anchor);
      if (!other || other->problem.checkpointed_layers == best->problem.checkpointed_layers) continue;
      StepPlan candidate = attempt(Policy::Greedy, other->problem.checkpointed_layers);
      const double s = simulate(candidate.problem, candidate.schedule).step_s;
      if (s < best_s) best_s = s, best.emplace(std::move(candidate));
    }
  }
  return std::move(*best);
}

DeviceMemory lay_out(const OffloadProblem& p, const Schedule& s, int64_t red_zone_bytes) {
  DeviceMemory m{device_tensors(p, s), {}, red_zone_bytes};
  for (auto& t : m.tensors) t.life.bytes += red_zone_bytes;
  m.layout = memory::Planner::plan(lifetimes(m.tensors));
  return m;
}

double lower_bound_step_s(const OffloadProblem& p) {
  const Schedule all = resident(p);
  const SimResult r = simulate(p, all);
  if (r.fits) return r.step_s;
  const double compute = std::accumulate(p.op_seconds.begin(), p.op_seconds.end(), 0.0);
  double h2d = 0, d2h = 0;
  for (int64_t bytes : p.bucket_bytes) h2d += p.cost.h2d.seconds(bytes), d2h += p.cost.d2h.seconds(bytes);
  const double cpu = double(p.total_params()) * (1 / p.cost.cpu_adam_params_per_s + 1 / p.cost.cpu_norm_params_per_s);
  return std::max({compute, h2d, d2h, cpu});
}

Schedule with_delayed_update(const OffloadProblem& p, Schedule s) {
  if (s.optimizer_on_device)
    throw std::invalid_argument("offload.overlap: delayed needs AdamW on the CPU; policy " + s.policy + " runs it on the device");
  std::vector<int> last_use(p.n_buckets, -1);
  for (int i = 0; i < p.n_ops; ++i)
    for (int b : p.op_buckets[i]) last_use[b] = i;
  for (auto& actions : s.before)
    std::erase_if(actions, [](const Action& a) { return a.kind == Action::Kind::Upload; });
  for (int b = 0; b < p.n_buckets; ++b)
    if (s.resident[b] && p.first_grad_op[b] >= 0) s.before[last_use[b] + 1].push_back({Action::Kind::Upload, b});
  s.delayed_update = true;
  return s;
}

Schedule make_schedule(const OffloadProblem& p, Policy policy) {
  if (minimum_device_bytes(p) > p.budget_bytes)
    throw BudgetError(std::string(to_string(policy)) + ": the model needs at least " + memory::format_bytes(minimum_device_bytes(p)) +
                      " with every bucket offloaded and " + std::to_string(p.checkpointed_layers) +
                      " block(s) checkpointed; the budget is " + memory::format_bytes(p.budget_bytes));
  switch (policy) {
    case Policy::Resident: {
      Schedule s = resident(p);
      check_fits(p, s, simulate(p, s));
      return s;
    }
    case Policy::ZeroOffload: {
      Schedule s = zero_offload(p);
      check_fits(p, s, simulate(p, s));
      return s;
    }
    case Policy::ChunkLru: return fitting(p, [&](int64_t budget) { return chunk_lru(p, budget); });
    case Policy::Greedy: return greedy(p);
  }
  throw std::logic_error("unknown policy");
}

}  // namespace ferry::offload
