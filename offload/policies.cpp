// The policies. Shared by all that run AdamW on the CPU (add_cpu_optimizer): each bucket's gradients
// leave for the host right after the last op writing them; their device buffer is released once the copy
// has had time to finish behind the ones queued before it (by the cost model), and AdamW runs on the bucket
// as soon as they land.
#include "offload/policies.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <optional>
#include <span>

#include "memory/host_buffer.h"

namespace ferry::offload {
namespace {

Schedule empty_schedule(const OffloadProblem& p, Policy policy, std::string construction) {
  Schedule s;
  s.policy = to_string(policy);
  s.construction = std::move(construction);
  s.before.resize(p.n_ops + 1);
  s.resident.assign(p.n_buckets, false);
  s.device_optimizer.assign(p.n_buckets, false);
  return s;
}

// Ideal compute timeline: when op i would start with no stalls.
std::vector<double> timeline(const OffloadProblem& p) {
  std::vector<double> t(p.n_ops + 1, 0.0);
  for (int i = 0; i < p.n_ops; ++i) t[i + 1] = t[i] + p.op_seconds[i];
  return t;
}

// A shortfall of the problem's budget; recomputing more blocks is suggested while any is left.
BudgetShortfall shortfall(const OffloadProblem& p, int64_t needed, std::string needed_by, std::string placement) {
  BudgetShortfall s{p.budget_bytes, needed, std::move(needed_by), std::move(placement), p.workspace_bytes, p.checkpointed_layers, p.n_layers};
  s.suggest_checkpointing = p.checkpointed_layers < p.n_layers;
  return s;
}

// A schedule laid out once and simulated on that layout.
struct Candidate {
  PlannedSchedule plan;
  SimResult result;
};

Candidate evaluate(const OffloadProblem& p, Schedule s, int64_t red_zone_bytes) {
  DeviceMemory memory = lay_out(p, s, red_zone_bytes);
  SimResult r = simulate(p, s, memory);
  if (!r.error.empty()) throw std::logic_error(s.label() + ": invalid schedule: " + r.error);
  return {{std::move(s), std::move(memory)}, std::move(r)};
}

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

// Gemini-like: nothing resident; each op fetches what it lacks right before it runs (no lookahead) and
// evicts the least recently used buckets while the budget is short.
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

// What the device tier keeps beside a bucket's weights: the fp32 master, m and v, and the fp32 gradient
// sums when micro-batches accumulate (DeviceMemory's OptimizerState and GradSum).
int64_t device_state_bytes(const OffloadProblem& p, int b) { return (p.grad_accum > 1 ? 16 : 12) * p.bucket_numel(b); }

// A travelling bucket's window: ops using it at most `gap` ops apart. Wider windows save trips over the
// link; with gap 1 a bucket stays on the device only through runs of consecutive ops that use it.
struct Window {
  int bucket, first, last;
};
constexpr int kWindowGap = 4;
constexpr int64_t kUnlimitedBytes = INT64_MAX / 4;  // a budget no plan reaches, with room to add to

std::vector<Window> windows_of(const OffloadProblem& p, const std::vector<bool>& resident, int gap) {
  std::vector<Window> windows;
  std::vector<int> open(p.n_buckets, -1);
  for (int i = 0; i < p.n_ops; ++i)
    for (int b : p.op_buckets[i]) {
      if (resident[b]) continue;
      if (open[b] >= 0 && i - windows[open[b]].last <= gap) {
        windows[open[b]].last = i;
      } else {
        open[b] = static_cast<int>(windows.size());
        windows.push_back({b, i, i});
      }
    }
  return windows;
}

// Within a point: weight releases first (they free room), then everything else in the order it was
// added (a bucket's gradient release follows its offload), then waits.
void order_actions(Schedule& s) {
  for (auto& actions : s.before)
    std::stable_sort(actions.begin(), actions.end(), [](const Action& a, const Action& b) {
      auto rank = [](Action::Kind k) { return k == Action::Kind::Release ? 0 : k == Action::Kind::Wait ? 2 : 1; };
      return rank(a.kind) < rank(b.kind);
    });
}

// With the pipelined update (Overlap::Pipelined), a bucket's first window cannot arrive before the CPU has
// updated it: pipelined_ready gives when, on the ideal timeline of this step.
std::vector<double> pipelined_ready(const OffloadProblem& p, const std::vector<bool>& device) {
  std::vector<double> ready(p.n_buckets, -INFINITY);
  double device_adam = 0;  // the previous step's device AdamW runs first on the compute stream
  for (int b = 0; b < p.n_buckets; ++b)
    if (device[b] && p.first_grad_op[b] >= 0) device_adam += double(p.bucket_params[b]) / p.cost.device_adam_params_per_s;
  std::vector<int> updated_on_cpu;
  for (int b = 0; b < p.n_buckets; ++b)
    if (!device[b] && p.first_grad_op[b] >= 0) updated_on_cpu.push_back(b);
  double updated = -device_adam;
  for (int b : in_first_use_order(p, std::move(updated_on_cpu))) ready[b] = updated += double(p.bucket_params[b]) / p.cost.cpu_adam_params_per_s;
  return ready;
}

// How greedy_for times a window's prefetch beside its just-in-time point.
struct PrefetchTiming {
  // Pipelined: a bucket's first window of the step waits for its update (pipelined_ready).
  Overlap overlap = Overlap::Backward;
  enum class Issue {
    // Each window on its own: its copy lands when the window's first op would start; a window the link
    // cannot bring in time goes as early as memory allows: the link then starts sooner at the step's
    // start, but every such window holds memory from there (GPT at 4K tokens: gigabytes that the device
    // tier could use).
    JustInTime,
    // Likewise, but no earlier than the link can start the copy, on the timeline the stalls it expects shift.
    Paced,
    // Every copy at its latest start that still lets it and every copy queued behind it land in time
    // (ExpectedLink): where the link is the bottleneck (a run of streamed blocks after the device tier's),
    // the copies start early enough to fill the idle link before it, and no earlier.
    LatestStart,
  };
  Issue issue = Issue::JustInTime;
};

// The h2d stream as greedy_for expects it, on the ideal timeline of the step: when it is next free, and
// by how much the stalls it expects so far shift the ops after them.
class ExpectedLink {
 public:
  ExpectedLink(const OffloadProblem& p, PrefetchTiming timing, const std::vector<Window>& windows)
      : p_(p), t_(timeline(p)), timing_(timing),
        // Pipelined: each bucket's first copy waits for its update, so the ops after it shift by the stall,
        // and issuing the copy before the update only holds memory (and the in-order link).
        shifted_(timing.overlap == Overlap::Pipelined || timing.issue != PrefetchTiming::Issue::JustInTime) {
    if (timing.issue != PrefetchTiming::Issue::LatestStart) return;
    // Each window's latest start, in the order of `windows` (which the in-order link keeps): a copy must land
    // before its own window's first op and before the next copy's latest start.
    latest_start_.resize(windows.size());
    double next = INFINITY;
    for (size_t i = windows.size(); i-- > 0;)
      next = latest_start_[i] = std::min(t_[windows[i].first], next) - p.cost.h2d.seconds(p.bucket_bytes[windows[i].bucket]);
  }

  double at(int point) const { return t_[point] + shift_; }

  // Where to issue the copy of window `index` (w) as its timing says, before memory has its say: not before
  // `released` (the bucket's previous window), nor `earliest` (its update, pipelined).
  int point(const Window& w, size_t index, int released, double earliest) const {
    int point = w.first;
    if (timing_.issue == PrefetchTiming::Issue::LatestStart) {
      // The latest point at or before its latest start, shifted by the stalls expected so far. Not held
      // back by when the link frees up in window order: the link takes copies in the order they are
      // issued, and a window issued late because its bucket's previous window ends late (a small bucket
      // read again two ops on) would otherwise hold back the larger copies after it.
      const double start = std::max(latest_start_[index] + shift_, earliest);
      while (point > released && at(point) > start) --point;
      return point;
    }
    // The latest point whose copy still lands in time, backing off only while that starts the copy sooner
    // (not before its update, nor, paced, before the link is free).
    const double copy = p_.cost.h2d.seconds(p_.bucket_bytes[w.bucket]);
    const double floor = std::max(earliest, timing_.issue == PrefetchTiming::Issue::Paced ? h2d_free_ : -INFINITY);
    while (point > released && at(point) > floor && std::max(at(point), h2d_free_) + copy > at(w.first)) --point;
    return point;
  }

  // The copy issued at `point`: it queues behind the ones before it; where it lands after the window's first
  // op would start, the ops after it are expected to shift by the difference.
  void issue(const Window& w, int point, double earliest) {
    h2d_free_ = std::max({at(point), h2d_free_, earliest}) + p_.cost.h2d.seconds(p_.bucket_bytes[w.bucket]);
    if (shifted_) shift_ += std::max(0.0, h2d_free_ - at(w.first));
  }

 private:
  const OffloadProblem& p_;
  const std::vector<double> t_;
  const PrefetchTiming timing_;
  const bool shifted_;
  std::vector<double> latest_start_;  // LatestStart only: per window, on the ideal timeline
  double h2d_free_ = 0, shift_ = 0;
};

// Device bytes greedy_for's schedule holds at each op before any window: the workspace, activations and
// gradient buffers (grads_live), the resident buckets with the device tier's optimizer state, and the device
// tier's gradients, which stay until its AdamW.
std::vector<int64_t> bytes_before_windows(const OffloadProblem& p, const std::vector<bool>& resident, const std::vector<bool>& device,
                                          const std::vector<int64_t>& grads_live) {
  int64_t resident_bytes = 0;
  for (int b = 0; b < p.n_buckets; ++b)
    if (resident[b]) resident_bytes += p.bucket_bytes[b] + (device[b] ? device_state_bytes(p, b) : 0);
  std::vector<int64_t> used(p.n_ops);
  for (int i = 0; i < p.n_ops; ++i) used[i] = p.workspace_bytes + p.activation_live[i] + grads_live[i] + resident_bytes;
  for (int b = 0; b < p.n_buckets; ++b)
    if (device[b] && p.first_grad_op[b] >= 0)
      for (int i = p.first_grad_op[b]; i < p.n_ops; ++i) used[i] += p.bucket_bytes[b];
  return used;
}

// Ferry's schedule for given tiers: the device tier (`device`: AdamW on the device, after the last op)
// and the other resident buckets stay; every other bucket travels once per window of uses, prefetched just
// in time on the ideal timeline (its copy, queued behind the ones before it, lands when the window's first
// op would start; where it cannot, issued earlier as `timing` says), later if memory forbids that point,
// and released right after the window's last use. `resident` includes `device`.
Schedule greedy_for(const OffloadProblem& p, const std::vector<bool>& resident, const std::vector<bool>& device, int64_t budget,
                    int gap = kWindowGap, PrefetchTiming timing = {}) {
  const int kept = static_cast<int>(std::count(resident.begin(), resident.end(), true));
  const int updated_there = static_cast<int>(std::count(device.begin(), device.end(), true));
  Schedule s = empty_schedule(p, Policy::Greedy, "prefetch schedule, " + std::to_string(kept) + " of " + std::to_string(p.n_buckets) +
                                                     " buckets resident" +
                                                     (updated_there > 0 ? ", " + std::to_string(updated_there) + " updated on the device" : "") +
                                                     (gap == 1 ? ", windows of consecutive uses" : ""));
  s.resident = resident;
  s.device_optimizer = device;
  if (updated_there > 0) s.before[p.n_ops].push_back({Action::Kind::DeviceAdam, -1});
  std::vector<int64_t> used = bytes_before_windows(p, resident, device, add_cpu_optimizer(p, s));
  std::vector<int> released_at(p.n_buckets, 0);  // a bucket's next window may not start before this point
  std::vector<double> ready = timing.overlap == Overlap::Pipelined ? pipelined_ready(p, device) : std::vector<double>(p.n_buckets, -INFINITY);
  const std::vector<Window> windows = windows_of(p, resident, gap);
  ExpectedLink link(p, timing, windows);
  for (size_t wi = 0; wi < windows.size(); ++wi) {  // in order of first use
    const Window& w = windows[wi];
    const int64_t bytes = p.bucket_bytes[w.bucket];
    const double earliest = ready[w.bucket];
    ready[w.bucket] = -INFINITY;  // its later windows carry the updated weights already
    auto fits_from = [&](int point) {
      for (int i = point; i <= w.last; ++i)
        if (used[i] + bytes > budget) return false;
      return true;
    };
    int point = link.point(w, wi, released_at[w.bucket], earliest);
    while (point < w.first && !fits_from(point)) ++point;  // then forward to the earliest point memory allows
    link.issue(w, point, earliest);
    s.before[point].push_back({Action::Kind::Prefetch, w.bucket});
    s.before[w.first].push_back({Action::Kind::Wait, w.bucket});
    s.before[w.last + 1].push_back({Action::Kind::Release, w.bucket});
    released_at[w.bucket] = w.last + 1;
    for (int i = point; i <= w.last; ++i) used[i] += bytes;
  }
  order_actions(s);
  return s;
}

// resident and zero-offload: one fixed construction, which fits or not.
PlannedSchedule fixed(const OffloadProblem& p, Schedule s, int64_t red_zone_bytes, const std::string& placement) {
  Candidate c = evaluate(p, std::move(s), red_zone_bytes);
  if (c.result.fits) return std::move(c.plan);
  BudgetShortfall need = shortfall(p, c.result.peak_device_bytes, "policy " + c.plan.schedule.policy, placement);
  need.suggest_greedy = minimum_device_bytes(p) <= p.budget_bytes;
  throw BudgetError(need);
}

// chunk-lru, built for budgets a little below the real one, so that the Planner's layout (which may need
// a little more than the sum of what is alive) still fits.
PlannedSchedule chunk_lru_fitting(const OffloadProblem& p, int64_t red_zone_bytes) {
  int64_t smallest = INT64_MAX;
  for (double margin : {0.0, 0.02, 0.05, 0.1, 0.2}) {
    Candidate c = evaluate(p, chunk_lru(p, static_cast<int64_t>(p.budget_bytes * (1 - margin))), red_zone_bytes);
    if (c.result.fits) return std::move(c.plan);
    smallest = std::min(smallest, c.result.peak_device_bytes);
  }
  BudgetShortfall need = shortfall(p, smallest, "policy chunk-lru", "with each bucket fetched on demand");
  need.suggest_greedy = true;
  throw BudgetError(need);
}

// Greedy's ranking of the buckets by what residency saves per byte they would occupy: the copy time of
// all their trips plus the compute stalls charged to their windows in the all-offloaded schedule (with
// unlimited memory). Most valuable first.
std::vector<int> rank_buckets(const OffloadProblem& p) {
  const std::vector<bool> none(p.n_buckets, false);
  const Schedule offloaded = greedy_for(p, none, none, kUnlimitedBytes);
  const SimResult base = evaluate(p, offloaded, 0).result;
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
  return ranking;
}

// Whether the delayed update, asked for, can apply to the candidate: some bucket's AdamW runs on the CPU.
bool can_delay(const Schedule& s, Overlap overlap) { return overlap == Overlap::Delayed && !s.all_device_optimizer() && !s.delayed_update; }
// Likewise the pipelined update, which is never slower than the update in the step (the next step's work
// only starts sooner), so greedy weighs candidates pipelined only.
bool can_pipeline(const Schedule& s, Overlap overlap) { return overlap == Overlap::Pipelined && !s.all_device_optimizer() && !s.pipelined_update; }

// The schedule with every prefetch issued in the order of its window's first use, none earlier than
// before (later where one needed sooner is issued after it), so windows only shrink. For the pipelined
// update: the CPU updates in first-use order and the h2d stream is FIFO, so a prefetch issued early for a
// bucket used late waits there for its update and holds back every copy behind it (greedy prefetches as
// early as memory allows where the link is the bottleneck).
Schedule prefetches_in_need_order(const OffloadProblem& p, Schedule s) {
  struct Issue {
    int point, need, bucket;
  };
  std::vector<Issue> issues;
  std::vector<int> open(p.n_buckets, -1);  // the bucket's prefetch whose wait is still to come
  for (int point = 0; point <= p.n_ops; ++point)
    for (const Action& a : s.before[point]) {
      if (a.kind == Action::Kind::Prefetch) open[a.bucket] = static_cast<int>(issues.size()), issues.push_back({point, point, a.bucket});
      if (a.kind == Action::Kind::Wait && open[a.bucket] >= 0) issues[open[a.bucket]].need = point, open[a.bucket] = -1;
    }
  std::vector<int> by_need(issues.size());
  std::iota(by_need.begin(), by_need.end(), 0);
  std::stable_sort(by_need.begin(), by_need.end(), [&](int a, int b) { return issues[a].need < issues[b].need; });
  for (auto& actions : s.before) std::erase_if(actions, [](const Action& a) { return a.kind == Action::Kind::Prefetch; });
  int point = 0;  // the latest issue point so far: never above the current need, as needs are sorted
  for (int i : by_need) {
    point = std::max(point, issues[i].point);
    s.before[point].push_back({Action::Kind::Prefetch, issues[i].bucket});
  }
  order_actions(s);
  return s;
}

// The ways greedy runs a candidate pipelined: its prefetches in need order, and as built.
std::array<Schedule, 2> pipelined_variants(const OffloadProblem& p, Schedule s) {
  Schedule in_need_order = with_pipelined_update(prefetches_in_need_order(p, s));
  return {std::move(in_need_order), with_pipelined_update(std::move(s))};
}

// A candidate as the step will run it, delayed or pipelined where it can be, so that greedy's paths compare
// what will run; pipelined, the faster of its variants.
Schedule as_run(const OffloadProblem& p, Schedule s, Overlap overlap) {
  if (can_pipeline(s, overlap)) {
    auto [in_need_order, as_built] = pipelined_variants(p, std::move(s));
    return estimate(p, in_need_order).step_s < estimate(p, as_built).step_s ? in_need_order : as_built;
  }
  return can_delay(s, overlap) ? with_delayed_update(p, std::move(s)) : s;
}

// Greedy's candidates as they come: keeps the fastest that fits, and the smallest peak for the error.
struct Best {
  Best(const OffloadProblem& problem, int64_t red_zone, Overlap overlap_mode) : p(problem), red_zone_bytes(red_zone), overlap(overlap_mode) {}
  const OffloadProblem& p;
  int64_t red_zone_bytes;
  Overlap overlap;
  std::optional<Candidate> fastest;
  int64_t smallest_peak = INT64_MAX;

  // A candidate is laid out only when its estimate (the same timings; the most bytes alive at once, which
  // no layout beats) says it could be the fastest that fits, or could lower the smallest peak.
  // With the delayed update asked for, both ways of running the candidate: one step behind, and in the step
  // (exact, and faster where the device tier's AdamW would wait behind the CPU's pending one).
  void consider(Schedule s) {
    if (can_pipeline(s, overlap)) {
      for (Schedule& variant : pipelined_variants(p, std::move(s))) consider_as_is(std::move(variant));
      return;
    }
    if (can_delay(s, overlap)) consider_as_is(with_delayed_update(p, s));
    consider_as_is(std::move(s));
  }

  void consider_as_is(Schedule s) {
    s.policy = to_string(Policy::Greedy);
    const SimResult guess = estimate(p, s);
    if (!guess.error.empty()) throw std::logic_error(s.label() + ": invalid schedule: " + guess.error);
    const bool could_be_fastest = guess.fits && (!fastest || guess.step_s < fastest->result.step_s);
    if (!could_be_fastest && guess.peak_device_bytes >= smallest_peak) return;
    Candidate c = evaluate(p, std::move(s), red_zone_bytes);
    smallest_peak = std::min(smallest_peak, c.result.peak_device_bytes);
    if (c.result.fits && (!fastest || c.result.step_s < fastest->result.step_s)) fastest.emplace(std::move(c));
  }
};

// The buckets in the order greedy moves them into the device tier: latest final gradients first, so that
// the tier's gradient buffers (alive from their first write to its AdamW after the last op) are held the
// shortest, and the gradients that would otherwise cross last, on the step's tail, stay.
std::vector<int> device_tier_order(const OffloadProblem& p) {
  std::vector<int> order;
  for (int b = 0; b < p.n_buckets; ++b)
    if (p.first_grad_op[b] >= 0) order.push_back(b);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p.first_grad_op[a] > p.first_grad_op[b]; });
  return order;
}

// How greedy ranks a move into the device tier while it grows one: the step time it saves, or that per
// byte the move adds to the device (the bucket's weights, gradients and fp32 master, m and v).
enum class TierGain { Seconds, SecondsPerByte };

// The step with `device` as the device tier (every other bucket streamed) built within `rung`, when its
// estimate fits below the next rung (the budget may lie between two); NaN otherwise.
double tier_step(const OffloadProblem& p, const std::vector<bool>& device, int64_t rung, PrefetchTiming timing) {
  const SimResult r = estimate(p, as_run(p, greedy_for(p, device, device, rung, kWindowGap, timing), timing.overlap));  // the candidates themselves are laid out later
  return double(r.peak_device_bytes) > 1.25 * double(rung) ? NAN : r.step_s;
}

// Device tiers greedy tries, in the order it grows them within `rung` (a value of the ladder, never the
// budget itself, so that more budget only adds candidates): device_tier_order cut into at most kGroups runs;
// each round moves into the device tier (every other bucket streamed) the run with the best gain among the
// moves that fit, until no move shortens the step; then halves, quarters, ... of the runs left, while one
// fits and shortens it. At most kGroups^2 / 2 + kGroups log2(buckets) estimates.
std::vector<std::vector<bool>> device_tier_path(const OffloadProblem& p, TierGain rank, int64_t rung, PrefetchTiming timing) {
  constexpr int kGroups = 8;
  const std::vector<int> order = device_tier_order(p);
  const int n = static_cast<int>(order.size()), groups = std::min(n, kGroups);
  auto group = [&](int g) {
    const int64_t first = int64_t(g) * n / groups, end = int64_t(g + 1) * n / groups;
    return std::span(order).subspan(size_t(first), size_t(end - first));
  };
  std::vector<bool> device(p.n_buckets, false), moved(groups, false);
  double current = INFINITY;
  std::vector<std::vector<bool>> path;
  for (int round = 0; round < groups; ++round) {
    int chosen = -1;
    double best_gain = 0, chosen_step = 0;
    for (int g = 0; g < groups; ++g) {
      if (moved[g]) continue;
      std::vector<bool> d = device;
      int64_t bytes = 0;
      for (int b : group(g)) d[b] = true, bytes += 2 * p.bucket_bytes[b] + device_state_bytes(p, b);
      const double step = tier_step(p, d, rung, timing);
      if (std::isnan(step)) continue;
      const double saved = std::isinf(current) ? 1 / step : current - step;  // the first move: the fastest
      const double gain = saved / (rank == TierGain::SecondsPerByte ? double(bytes) : 1.0);
      if (gain > best_gain) best_gain = gain, chosen = g, chosen_step = step;
    }
    if (chosen < 0) break;
    moved[chosen] = true;
    for (int b : group(chosen)) device[b] = true;
    current = chosen_step;
    path.push_back(device);
  }
  for (int g = 0; g < groups; ++g)  // what memory leaves for parts of the runs left
    for (std::span<const int> left = moved[g] ? std::span<const int>() : group(g); left.size() > 0;) {
      size_t take = left.size();
      double step = NAN;
      std::vector<bool> d;
      for (; take >= 1; take /= 2) {
        d = device;
        for (int b : left.first(take)) d[b] = true;
        if (step = tier_step(p, d, rung, timing); !std::isnan(step) && step < current) break;
      }
      if (take == 0) break;
      device = std::move(d), current = step, path.push_back(device);
      left = left.subspan(take);
    }
  return path;
}

// Device tiers that are prefixes of device_tier_order, each built for unlimited memory (so the budget only
// decides which fit, and more of it never removes one), every other bucket streamed just in time: all of
// them, and each with the trained buckets of the step's first op added. Those are the one copy no compute
// can hide (nothing runs before the first op), and in GPT the tied embedding is also read by the head, the
// last op of forward and the first of backward: two trips per micro-batch, one of them a stall.
// Candidates that cannot fit are skipped: the tier's weights and state beside the largest activations, or
// with its gradients too (alive at its AdamW) beside the workspace, exceed the budget. Longer prefixes hold
// more, so the scan stops at the first.
void consider_device_prefixes(const OffloadProblem& p, Best& best, PrefetchTiming build) {
  const std::vector<int> order = device_tier_order(p);
  const int64_t most_activations = *std::max_element(p.activation_live.begin(), p.activation_live.end());
  for (bool with_first_op : {false, true}) {
    std::vector<bool> device(p.n_buckets, false);
    int64_t kept = 0, grads = 0;  // the tier's weights and optimizer state; its gradients
    auto add = [&](int b) {
      if (!device[b]) device[b] = true, kept += p.bucket_bytes[b] + device_state_bytes(p, b), grads += p.bucket_bytes[b];
    };
    auto could_fit = [&] {
      return p.workspace_bytes + std::max(most_activations + kept, kept + grads) <= p.budget_bytes;
    };
    if (with_first_op)
      for (int b : p.op_buckets[0])
        if (p.first_grad_op[b] >= 0) add(b);
    for (size_t n = 0; n <= order.size() && could_fit(); ++n) {
      if (n > 0) add(order[n - 1]);
      if (could_fit() && (n > 0 || with_first_op)) best.consider(greedy_for(p, device, device, kUnlimitedBytes, kWindowGap, build));
    }
  }
}

// The device tier and as much of the residency ranking as `budget` holds beside it, counting what stays
// all step (weights, the tier's optimizer state and gradients), the largest activations and the workspace.
std::vector<bool> resident_beside(const OffloadProblem& p, const std::vector<bool>& device, const std::vector<int>& ranking,
                                  int64_t budget) {
  int64_t held = p.workspace_bytes + *std::max_element(p.activation_live.begin(), p.activation_live.end());
  for (int b = 0; b < p.n_buckets; ++b)
    if (device[b]) held += 2 * p.bucket_bytes[b] + device_state_bytes(p, b);
  std::vector<bool> resident = device;
  for (int b : ranking) {
    if (resident[b]) continue;
    if (held + p.bucket_bytes[b] > budget) break;
    resident[b] = true, held += p.bucket_bytes[b];
  }
  return resident;
}

// Greedy's prefetch schedules (greedy_for), their windows timed and its device-tier paths grown as `build`
// says; best runs each with its own overlap.
void consider_prefetch_schedules(const OffloadProblem& p, Best& best, bool mixed_tiers, PrefetchTiming build) {
  constexpr int kPrefixes = 24;
  constexpr double kRung = 1.25;
  std::vector<int64_t> ladder{kUnlimitedBytes};  // unlimited memory first
  for (double rung = double(minimum_device_bytes(p)); rung <= double(p.budget_bytes); rung *= kRung)
    ladder.push_back(static_cast<int64_t>(rung));
  // Nothing resident and every window as short as it can be: the least memory a prefetch schedule needs.
  const std::vector<bool> none(p.n_buckets, false);
  for (int64_t rung : ladder) best.consider(greedy_for(p, none, none, rung, 1, build));
  const std::vector<int> ranking = rank_buckets(p);
  const int64_t most_activations = *std::max_element(p.activation_live.begin(), p.activation_live.end());
  const int prefixes = std::min(p.n_buckets, kPrefixes);
  for (int k = 0; k <= prefixes; ++k) {
    const int size = static_cast<int>(int64_t(k) * p.n_buckets / std::max(1, prefixes));
    std::vector<bool> resident_set(p.n_buckets, false);
    int64_t resident_bytes = 0;
    for (int i = 0; i < size; ++i) resident_set[ranking[i]] = true, resident_bytes += p.bucket_bytes[ranking[i]];
    if (p.workspace_bytes + resident_bytes + most_activations > p.budget_bytes) break;  // neither this prefix nor a larger one fits
    for (int64_t rung : ladder) best.consider(greedy_for(p, resident_set, none, rung, kWindowGap, build));
  }
  // Each device tier of both paths at every rung: every other bucket streamed (both window gaps), and with
  // the most of the residency ranking the rung holds beside it resident too.
  for (int64_t rung : mixed_tiers ? ladder : std::vector<int64_t>{})
    for (TierGain rank : {TierGain::Seconds, TierGain::SecondsPerByte})
      for (const std::vector<bool>& device : device_tier_path(p, rank, rung, build)) {
        for (int gap : {kWindowGap, 1}) best.consider(greedy_for(p, device, device, rung, gap, build));
        best.consider(greedy_for(p, resident_beside(p, device, ranking, rung), device, rung, kWindowGap, build));
      }
  if (mixed_tiers) consider_device_prefixes(p, best, build);
}

// Ferry's policy.
// What it optimises: the Simulator's predicted step time, under the budget, over the three tiers.
// The greedy criterion: every bucket starts offloaded and scheduled just in time (greedy_for). Buckets are
// ranked once (rank_buckets); the resident set is then a prefix of that ranking; greedy builds the plan of
// each prefix (at most kPrefixes of them, evenly spaced) for unlimited memory and for each budget of a
// fixed ladder (the minimum the model needs times 1.25^j), and keeps the fastest plan whose layout fits
// the budget. The resident, zero-offload and chunk-lru constructions are candidates too (relabelled
// greedy, their construction kept), so greedy is never predicted slower than those where they fit; so is,
// at every rung, the schedule with nothing resident and windows of consecutive uses only, which needs the
// least memory (without it, greedy found no plan for small budgets that an exhaustive search could meet).
// With mixed tiers, the device tiers of device_tier_path are candidates too (every other bucket streamed):
// the CPU's AdamW over every parameter is what bounds an offloaded step, and each bucket updated on the
// device takes its share off the CPU, the d2h link and the h2d link at once. So are the prefixes of
// device_tier_order (consider_device_prefixes), built for unlimited memory: the paths are grown within a
// rung, which can lie up to 1.25x below the budget, and a prefix can use the budget to the last bucket.
// Every other candidate is built without looking at the budget (ladder budgets above it are simply not
// built: their plans could not be used anyway), so a larger budget only adds candidates: more budget never
// gives a slower plan.
// All of that three times: prefetches unpaced, paced and at their latest start (PrefetchTiming::Issue);
// the Simulator decides which serves a candidate best; with the pipelined update, also built
// as for the update in the step (whose plans, pipelined, are never slower than in the step, so greedy
// pipelined is never slower than greedy updating in the step).
// Complexity: ((prefixes + 1) x ladder rungs up to the budget) simulations, each O(ops + actions) plus one
// Planner run, at most 26 x log_1.25(budget / minimum) of them; with mixed tiers, per rung at most 2 x 36
// more for the two paths and 3 for each device tier on them; and two estimates per prefix that could fit;
// times the three timings (six with the pipelined update).
PlannedSchedule greedy(const OffloadProblem& p, int64_t red_zone_bytes, bool mixed_tiers, Overlap overlap) {
  Best best(p, red_zone_bytes, overlap);
  best.consider(resident(p));
  best.consider(zero_offload(p));
  // chunk-lru at the budget itself: LRU is a stack algorithm (more room never means more fetches), so
  // this candidate keeps the monotonicity.
  for (int64_t budget : {p.budget_bytes, static_cast<int64_t>(p.budget_bytes * 0.95)}) best.consider(chunk_lru(p, budget));
  std::vector<Overlap> builds{overlap};
  if (overlap == Overlap::Pipelined) builds.push_back(Overlap::Backward);
  for (Overlap build : builds)
    for (PrefetchTiming::Issue issue : {PrefetchTiming::Issue::JustInTime, PrefetchTiming::Issue::Paced, PrefetchTiming::Issue::LatestStart})
      consider_prefetch_schedules(p, best, mixed_tiers, PrefetchTiming{build, issue});
  if (!best.fastest) throw BudgetError(shortfall(p, best.smallest_peak, "greedy's smallest plan", ""));
  return std::move(best.fastest->plan);
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

std::string budget_message(const BudgetShortfall& s) {
  std::vector<std::string> fixes{"raise it"};
  if (s.suggest_greedy) fixes.push_back("set offload.policy: greedy");
  if (s.suggest_checkpointing) fixes.push_back("set train.activation_checkpointing: auto");
  std::string fix = fixes[0];
  for (size_t i = 1; i < fixes.size(); ++i) fix += (i + 1 == fixes.size() ? " or " : ", ") + fixes[i];
  std::string budget = memory::format_bytes(s.budget_bytes), needed = memory::format_bytes(s.needed_bytes);
  if (budget == needed)  // rounded alike: the bytes tell them apart
    budget += " (" + std::to_string(s.budget_bytes) + " bytes)", needed += " (" + std::to_string(s.needed_bytes) + " bytes)";
  std::string how = s.placement;
  if (s.blocks > 0) {
    const std::string blocks = std::to_string(s.recomputed_blocks) + " of " + std::to_string(s.blocks) + " blocks recomputed";
    how = how.empty() ? "with " + blocks : how + " and " + blocks;
  }
  if (s.workspace_bytes > 0)  // the device sized it, not the config: say what part of the need it is
    how += (how.empty() ? "" : " ") + std::string("(") + memory::format_bytes(s.workspace_bytes) + " of it the device libraries' workspace)";
  return "offload.gpu_budget: " + budget + " is below the " + needed + " " + s.needed_by + " needs" + (how.empty() ? "" : " " + how) + "; " + fix;
}

TierTotals tier_totals(const OffloadProblem& p, const Schedule& s) {
  TierTotals t;
  for (int b = 0; b < p.n_buckets; ++b) {
    const int tier = static_cast<int>(s.tier(b));
    t.params[tier] += p.bucket_params[b], t.bytes[tier] += p.bucket_bytes[b];
  }
  return t;
}

int64_t minimum_device_bytes(const OffloadProblem& p) {
  int64_t need = 0;
  for (int i = 0; i < p.n_ops; ++i) {
    int64_t at = p.workspace_bytes + p.activation_live[i];
    for (int b : p.op_buckets[i]) at += p.bucket_bytes[b] * (p.first_grad_op[b] >= 0 && i >= p.first_grad_op[b] ? 2 : 1);
    need = std::max(need, at);
  }
  return need;
}

std::vector<int64_t> add_cpu_optimizer(const OffloadProblem& p, Schedule& s) {
  const auto t = timeline(p);
  std::vector<int64_t> grads_live(p.n_ops, 0);
  std::vector<int> offloaded;  // in the order their copies queue on the d2h stream: by the point they leave
  for (int b = 0; b < p.n_buckets; ++b)
    if (p.first_grad_op[b] >= 0 && !s.device_optimizer[b]) offloaded.push_back(b);
  std::stable_sort(offloaded.begin(), offloaded.end(), [&](int a, int b) { return p.last_grad_op[a] < p.last_grad_op[b]; });
  double d2h_free = 0;  // on the ideal timeline: a copy waits behind the ones queued before it
  for (int b : offloaded) {
    const int out = p.last_grad_op[b] + 1;
    s.before[out].push_back({Action::Kind::OffloadGrads, b});
    s.before[out].push_back({Action::Kind::CpuAdam, b});
    d2h_free = std::max(d2h_free, t[out]) + p.cost.d2h.seconds(p.bucket_bytes[b]);
    int release = out;
    while (release < p.n_ops && t[release] < d2h_free) ++release;
    release = std::min(p.n_ops, release + 1);
    s.before[release].push_back({Action::Kind::ReleaseGrads, b});
    for (int i = p.first_grad_op[b]; i < release && i < p.n_ops; ++i) grads_live[i] += p.bucket_bytes[b];
    if (s.resident[b]) s.before[p.n_ops].push_back({Action::Kind::Upload, b});
  }
  return grads_live;
}

PlannedSchedule make_schedule(const OffloadProblem& p, Policy policy, int64_t red_zone_bytes, bool mixed_tiers, Overlap overlap) {
  if (const int64_t least = minimum_device_bytes(p); least > p.budget_bytes)
    throw BudgetError(shortfall(p, least, "this model", "with every bucket offloaded"));
  switch (policy) {
    case Policy::Resident: return fixed(p, resident(p), red_zone_bytes, "with every bucket and AdamW's state on the device");
    case Policy::ZeroOffload: return fixed(p, zero_offload(p), red_zone_bytes, "with every bucket's weights on the device");
    case Policy::ChunkLru: return chunk_lru_fitting(p, red_zone_bytes);
    case Policy::Greedy: return greedy(p, red_zone_bytes, mixed_tiers, overlap);
  }
  throw std::logic_error("unknown policy");
}

Schedule with_delayed_update(const OffloadProblem& p, Schedule s) {
  if (s.all_device_optimizer())
    throw std::invalid_argument("offload.overlap: delayed needs AdamW on the CPU for some bucket; " + s.label() + " runs it on the device for every one");
  std::vector<int> last_use(p.n_buckets, -1);
  for (int i = 0; i < p.n_ops; ++i)
    for (int b : p.op_buckets[i]) last_use[b] = i;
  for (auto& actions : s.before)
    std::erase_if(actions, [](const Action& a) { return a.kind == Action::Kind::Upload; });
  for (int b = 0; b < p.n_buckets; ++b)
    if (s.resident[b] && !s.device_optimizer[b] && p.first_grad_op[b] >= 0) s.before[last_use[b] + 1].push_back({Action::Kind::Upload, b});
  s.delayed_update = true;
  return s;
}

Schedule with_pipelined_update(Schedule s) {
  if (s.all_device_optimizer())
    throw std::invalid_argument("offload.overlap: pipelined needs AdamW on the CPU for some bucket; " + s.label() + " runs it on the device for every one");
  s.pipelined_update = true;
  return s;
}

Checkpointing parse_checkpointing(const std::string& name) {
  if (name == "false") return Checkpointing::Off;
  if (name == "true") return Checkpointing::On;
  if (name == "auto") return Checkpointing::Auto;
  throw std::invalid_argument("train.activation_checkpointing: '" + name + "'; expected auto, true or false");
}

}  // namespace ferry::offload
