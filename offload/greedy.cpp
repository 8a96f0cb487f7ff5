// Greedy, Ferry's policy: its candidates (the baselines, prefetch schedules of residency prefixes at a ladder
// of budgets, device tiers grown along two paths and by prefix), each as the step will run it, and the
// fastest the Simulator predicts that fits the budget.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <exception>
#include <functional>
#include <numeric>
#include <optional>
#include <span>
#include <type_traits>
#include <unordered_set>

#include "offload/greedy_schedule.h"
#include "offload/in_parallel.h"

namespace ferry::offload::detail {
namespace {

// A schedule's content as two independent 64-bit hashes: every action at its point, the tiers and the
// overlap flags, all that its timings and device tensors depend on. Greedy's paths build the same schedule
// many times (rungs above what its tiers need, prefetch timings that agree): each is estimated, and
// considered, once.
struct ScheduleKey {
  uint64_t a = 0x243f6a8885a308d3ull, b = 0x13198a2e03707344ull;
  bool operator==(const ScheduleKey&) const = default;
};
struct ScheduleKeyHash {
  size_t operator()(const ScheduleKey& k) const { return k.a; }
};

ScheduleKey key_of(const Schedule& s) {
  auto mix = [](uint64_t h) {  // splitmix64's finaliser
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    return h ^ (h >> 31);
  };
  ScheduleKey k;
  auto add = [&](uint64_t v) { k.a = mix(k.a ^ v), k.b = mix(std::rotl(k.b, 29) + v * 0x9e3779b97f4a7c15ull); };
  for (size_t point = 0; point < s.before.size(); ++point) {
    if (s.before[point].empty()) continue;
    add(point << 32 | s.before[point].size());
    for (const Action& a : s.before[point]) add(uint64_t(a.kind) << 32 | uint32_t(a.bucket));
  }
  for (size_t b = 0; b < s.resident.size(); ++b) add(s.resident[b] + 2 * s.device_optimizer[b]);
  add(s.delayed_update + 2 * s.pipelined_update);
  return k;
}

// What greedy reads of an estimate (SimResult without the per-op stalls, which would take gigabytes kept for
// every schedule of a deep model).
struct Estimate {
  std::string error;
  bool fits = false;
  double step_s = 0;
  int64_t peak_device_bytes = 0;
};

// The Simulator's estimates of one greedy search, each made once, whichever threads ask: of each distinct
// schedule, and of each device tier at a rung and prefetch timing (tier_step; both device-tier paths, and each
// round of a path, try many of the same tiers again). With them, the ParallelFor the search spreads its work by.
class Estimates {
 public:
  Estimates(const OffloadProblem& p, const ParallelFor& parallel) : p_(p), parallel_(parallel) {}
  const ParallelFor& parallel() const { return parallel_; }
  const Estimate& of(const Schedule& s) { return of(s, key_of(s)); }
  const Estimate& of(const Schedule& s, const ScheduleKey& key) {
    return known_.get(key, [&] {
      SimResult r = estimate(p_, s);
      return Estimate{std::move(r.error), r.fits, r.step_s, r.peak_device_bytes};
    });
  }

  // The step of `device` at `rung` and `timing`, from `step()` the first time it is asked for.
  template <class Step>
  double of_tier(const std::vector<bool>& device, int64_t rung, PrefetchTiming timing, Step step) {
    return tiers_.get(TierKey{device, rung, timing.overlap, timing.issue}, step);
  }

 private:
  struct TierKey {
    std::vector<bool> device;
    int64_t rung;
    Overlap overlap;
    PrefetchTiming::Issue issue;
    bool operator==(const TierKey&) const = default;
  };
  struct TierKeyHash {
    size_t operator()(const TierKey& k) const {
      return std::hash<std::vector<bool>>{}(k.device) ^
             std::hash<int64_t>{}(k.rung * 31 + int(k.overlap) * 7 + int(k.issue));
    }
  };
  const OffloadProblem& p_;
  const ParallelFor& parallel_;
  ComputedOnce<ScheduleKey, Estimate, ScheduleKeyHash> known_;
  ComputedOnce<TierKey, double, TierKeyHash> tiers_;
};

// Greedy's ranking of the buckets by what residency saves per byte they would occupy: the copy time of
// all their trips plus the compute stalls charged to their windows in the all-offloaded schedule (with
// unlimited memory). Most valuable first.
std::vector<int> rank_buckets(const OffloadProblem& p) {
  const std::vector<bool> none(p.n_buckets, false);
  const Schedule offloaded = greedy_for(p, none, none, kUnlimitedBytes);
  const SimResult base = estimate(p, offloaded);  // the replay's stalls: no layout needed
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
bool can_delay(const Schedule& s, Overlap overlap) {
  return overlap == Overlap::Delayed && !s.all_device_optimizer() && !s.delayed_update;
}
// Likewise the pipelined update, which is never slower than the update in the step (the next step's work
// only starts sooner), so greedy weighs candidates pipelined only.
bool can_pipeline(const Schedule& s, Overlap overlap) {
  return overlap == Overlap::Pipelined && !s.all_device_optimizer() && !s.pipelined_update;
}

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
      if (a.kind == Action::Kind::Prefetch)
        open[a.bucket] = static_cast<int>(issues.size()), issues.push_back({point, point, a.bucket});
      if (a.kind == Action::Kind::Wait && open[a.bucket] >= 0) issues[open[a.bucket]].need = point, open[a.bucket] = -1;
    }
  std::vector<int> by_need(issues.size());
  std::iota(by_need.begin(), by_need.end(), 0);
  std::stable_sort(by_need.begin(), by_need.end(), [&](int a, int b) { return issues[a].need < issues[b].need; });
  for (auto& actions : s.before)
    std::erase_if(actions, [](const Action& a) { return a.kind == Action::Kind::Prefetch; });
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

// The estimate of a candidate as the step will run it, delayed or pipelined where it can be, so that greedy's
// paths compare what will run; pipelined, the faster of its variants.
const Estimate& as_run(const OffloadProblem& p, Estimates& estimates, Schedule s, Overlap overlap) {
  if (can_pipeline(s, overlap)) {
    auto [in_need_order, as_built] = pipelined_variants(p, std::move(s));
    const Estimate &a = estimates.of(in_need_order), &b = estimates.of(as_built);
    return a.step_s < b.step_s ? a : b;
  }
  return estimates.of(can_delay(s, overlap) ? with_delayed_update(p, std::move(s)) : s);
}

// Greedy's candidates as they come: keeps the fastest that fits, and where asked the smallest peak (for the
// error when none fits; laying out every candidate that could lower it costs more than the search itself).
// With stop_at_first_fit, only whether any candidate fits: settled() once one does.
// A candidate comes as a function that builds it (consider). Queued candidates are built, turned into the ways
// they will run, keyed and estimated through the ParallelFor, then weighed one at a time in the order they came
// (weigh_queued): the plan is the one that weighing each as it comes gives, whatever the number of threads.
struct Best {
  struct Goal {
    bool smallest_peak = false;
    bool stop_at_first_fit = false;
  };
  Best(const OffloadProblem& problem, Estimates& known, int64_t red_zone, Overlap overlap_mode, Goal search_goal)
      : p(problem), estimates(known), red_zone_bytes(red_zone), overlap(overlap_mode), goal(search_goal) {}
  const OffloadProblem& p;
  Estimates& estimates;
  int64_t red_zone_bytes;
  Overlap overlap;
  Goal goal;
  std::optional<Candidate> fastest;
  int64_t smallest_peak = INT64_MAX;
  std::unordered_set<ScheduleKey, ScheduleKeyHash> considered;

  // Whether a candidate weighed so far fits, with stop_at_first_fit. That search weighs each candidate as it comes
  // (the queue first), so that it builds none after the first that fits.
  bool settled() {
    if (!goal.stop_at_first_fit) return false;
    weigh_queued();
    return found_fit();
  }
  bool found_fit() const { return goal.stop_at_first_fit && fastest; }

  // Greedy's residency ranking (rank_buckets), made on first use: a search that settles early needs none.
  const std::vector<int>& residency_ranking() {
    if (!ranking) ranking = rank_buckets(p);
    return *ranking;
  }
  std::optional<std::vector<int>> ranking;

  // A candidate: `make` returns its schedule, or several to weigh in order. It runs later, on any thread: what it
  // reads must outlive the search, or be captured by value.
  template <class Make>
  void consider(Make make) {
    if constexpr (std::is_same_v<std::invoke_result_t<Make&>, Schedule>)
      queued.emplace_back([make]() mutable {
        std::vector<Schedule> one;
        one.push_back(make());
        return one;
      });
    else queued.emplace_back(std::move(make));
    if (queued.size() >= kQueued) weigh_queued();
  }

  // Every queued candidate made ready through the ParallelFor, then weighed in the order it came.
  void weigh_queued() {
    const double to_beat = fastest ? fastest->result.step_s : INFINITY;  // the weighing only lowers it
    std::vector<Made> made =
        in_parallel(estimates.parallel(), queued.size(), [&](size_t i) { return ready(queued[i], to_beat); });
    queued.clear();
    for (Made& candidate : made) {
      if (found_fit()) break;
      if (candidate.error) std::rethrow_exception(candidate.error);
      for (Ready& way : candidate.ways) consider_as_is(std::move(way));
    }
  }

  // The search's end: every candidate weighed, the fastest laid out.
  void finish() {
    weigh_queued();
    lay_out_pending();
  }

 private:
  // A way to run a candidate, its key and its estimate.
  struct Ready {
    Schedule schedule;
    ScheduleKey key;
    const Estimate* estimate = nullptr;
  };
  // A queued candidate made ready on a worker thread; what it threw, rethrown when it is weighed.
  struct Made {
    std::vector<Ready> ways;
    std::exception_ptr error;
  };
  static constexpr size_t kQueued = 64;
  std::vector<std::function<std::vector<Schedule>()>> queued;

  // The schedules of `make`, each in the ways it will run, keyed and estimated. One that consider_as_is will
  // not lay out, as it cannot fit or beat `to_beat`, is kept without its actions: its memory goes back now,
  // while it is in the cache, not with the batch (kept with the batch, a one-thread search took 10-20% longer).
  Made ready(const std::function<std::vector<Schedule>()>& make, double to_beat) const {
    Made made;
    try {
      for (Schedule& s : make())
        for (Schedule& way : ways_to_run(std::move(s))) {
          way.policy = to_string(Policy::Greedy);
          if (p.compact_state && way.any_device_optimizer())
            throw std::logic_error(way.label() + ": AdamW on the device, and the state is on the host only");
          const ScheduleKey key = key_of(way);
          const Estimate& guess = estimates.of(way, key);
          if (!(guess.fits && guess.step_s < to_beat) && !goal.smallest_peak && guess.error.empty()) way = Schedule();
          made.ways.push_back({std::move(way), key, &guess});
        }
    } catch (...) {
      made.error = std::current_exception();
    }
    return made;
  }

  // Pipelined, both variants of the candidate. With the delayed update asked for, both ways of running it: one
  // step behind, and in the step (exact, and faster where the device tier's AdamW would wait behind the CPU's
  // pending one).
  std::vector<Schedule> ways_to_run(Schedule s) const {
    std::vector<Schedule> ways;
    if (can_pipeline(s, overlap)) {
      for (Schedule& variant : pipelined_variants(p, std::move(s))) ways.push_back(std::move(variant));
      return ways;
    }
    if (can_delay(s, overlap)) ways.push_back(with_delayed_update(p, s));
    ways.push_back(std::move(s));
    return ways;
  }

  // A candidate is laid out only when its estimate (the same timings; the most bytes alive at once, which
  // no layout beats) says it could be the fastest that fits, or could lower the smallest peak.
  // A schedule considered before is skipped: its estimate and layout are the same, and neither the fastest
  // (replaced only by a faster one) nor the smallest peak (only lowered) can change.
  void consider_as_is(Ready way) {
    if (found_fit()) return;
    if (!considered.insert(way.key).second) return;
    const Estimate& guess = *way.estimate;
    Schedule& s = way.schedule;
    if (!guess.error.empty()) throw std::logic_error(s.label() + ": invalid schedule: " + guess.error);
    const bool could_be_fastest = guess.fits && (!fastest || guess.step_s < fastest->result.step_s);
    const bool could_lower_peak = goal.smallest_peak && guess.peak_device_bytes < smallest_peak;
    if (!could_be_fastest && !could_lower_peak) return;
    if (!goal.smallest_peak && !goal.stop_at_first_fit) {
      pending.push_back({std::move(s), guess.step_s});
      if (pending.size() >= kBatch) lay_out_pending();
      return;
    }
    Candidate c = evaluate(p, std::move(s), red_zone_bytes);
    smallest_peak = std::min(smallest_peak, c.result.peak_device_bytes);
    if (c.result.fits && (!fastest || c.result.step_s < fastest->result.step_s)) fastest.emplace(std::move(c));
  }

  // Looking for the fastest, the candidates that could be it are laid out in batches, fastest first, up to the
  // first whose layout fits: the layouts are the search's dearest step, and candidates mostly come slower ones
  // first. The same plan as laying each out as it comes: the first, in the order they came, of the least step
  // among the candidates whose layout fits.
  void lay_out_pending() {
    std::stable_sort(pending.begin(), pending.end(),
                     [](const Pending& a, const Pending& b) { return a.step_s < b.step_s; });
    for (Pending& candidate : pending) {
      if (fastest && candidate.step_s >= fastest->result.step_s) break;
      Candidate c = evaluate(p, std::move(candidate.schedule), red_zone_bytes);
      if (c.result.fits && (!fastest || c.result.step_s < fastest->result.step_s)) {
        fastest.emplace(std::move(c));
        break;
      }
    }
    pending.clear();
  }
  struct Pending {
    Schedule schedule;
    double step_s;
  };
  static constexpr size_t kBatch = 32;
  std::vector<Pending> pending;
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
double tier_step(const OffloadProblem& p, Estimates& estimates, const std::vector<bool>& device, int64_t rung,
                 PrefetchTiming timing) {
  return estimates.of_tier(device, rung, timing, [&] {
    // An estimate: the candidates themselves are laid out later.
    const Estimate& r = as_run(p, estimates, greedy_for(p, device, device, rung, kWindowGap, timing), timing.overlap);
    return double(r.peak_device_bytes) > 1.25 * double(rung) ? NAN : r.step_s;
  });
}

// Device tiers greedy tries, in the order it grows them within `rung` (a value of the ladder, never the
// budget itself, so that more budget only adds candidates): device_tier_order cut into at most kGroups runs;
// each round moves into the device tier (every other bucket streamed) the run with the best gain among the
// moves that fit, until no move shortens the step; then halves, quarters, ... of the runs left, while one
// fits and shortens it. At most kGroups^2 / 2 + kGroups log2(buckets) estimates; a round's through the ParallelFor.
std::vector<std::vector<bool>> device_tier_path(const OffloadProblem& p, Estimates& estimates, TierGain rank,
                                                int64_t rung, PrefetchTiming timing) {
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
    const std::vector<double> steps = in_parallel(estimates.parallel(), size_t(groups), [&](size_t g) {
      std::vector<bool> d = device;
      for (int b : group(int(g))) d[b] = true;
      return moved[g] ? NAN : tier_step(p, estimates, d, rung, timing);
    });
    int chosen = -1;
    double best_gain = 0;
    for (int g = 0; g < groups; ++g) {
      if (std::isnan(steps[g])) continue;  // moved, or does not fit
      int64_t bytes = 0;
      for (int b : group(g)) bytes += 2 * p.bucket_bytes[b] + device_state_bytes(p, b);
      const double saved = std::isinf(current) ? 1 / steps[g] : current - steps[g];  // the first move: the fastest
      const double gain = saved / (rank == TierGain::SecondsPerByte ? double(bytes) : 1.0);
      if (gain > best_gain) best_gain = gain, chosen = g;
    }
    if (chosen < 0) break;
    moved[chosen] = true;
    for (int b : group(chosen)) device[b] = true;
    current = steps[chosen];
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
        if (step = tier_step(p, estimates, d, rung, timing); !std::isnan(step) && step < current) break;
      }
      if (take == 0) break;
      device = std::move(d), current = step, path.push_back(device);
      left = left.subspan(take);
    }
  return path;
}

// The candidates of one device tier of consider_device_prefixes, in order: every other bucket streamed, built for
// unlimited memory; and with its copies at their latest start (what serves the link-bound blocks behind a device tier),
// built within rungs kFineRung apart, from the least its schedule can hold (least_greedy_bytes) up to what it holds
// built for unlimited memory. Where the tier fills the budget to the last bucket, copies issued early for unlimited
// memory overflow it by a few megabytes, and the highest rung of the budget-wide ladder below it can lie under
// the tier's own need, where every copy waits for its first use: GPT 3B's width at 4 GiB kept a bucket less on
// the device (1.066 of the bound, not 1.043). The rungs follow the tier, not the budget, so that more budget
// only adds candidates.
std::vector<Schedule> device_prefix_candidates(const OffloadProblem& p, Estimates& estimates,
                                               const std::vector<bool>& device, PrefetchTiming build) {
  constexpr double kFineRung = 1.02;
  constexpr int kFineRungs = 4;
  std::vector<Schedule> candidates;
  candidates.push_back(greedy_for(p, device, device, kUnlimitedBytes, kWindowGap, build));
  if (build.issue != PrefetchTiming::Issue::LatestStart) return candidates;
  const double most = double(estimates.of(candidates.front()).peak_device_bytes);
  double rung = double(least_greedy_bytes(p, device, device));
  for (int j = 0; j < kFineRungs && rung < most && rung <= double(p.budget_bytes); ++j, rung *= kFineRung)
    candidates.push_back(greedy_for(p, device, device, static_cast<int64_t>(rung), kWindowGap, build));
  return candidates;
}

// Device tiers that are prefixes of device_tier_order, each built for unlimited memory and within rungs of its
// own (device_prefix_candidates; the budget only decides which fit, and more of it never removes one), every
// other bucket streamed just in time: all of them, and each with the trained buckets of the step's first op
// added. Those are the one copy no compute can hide (nothing runs before the first op), and in GPT the tied
// embedding is also read by the head, the last op of forward and the first of backward: two trips per
// micro-batch, one of them a stall. Candidates that cannot fit are skipped: the tier's weights and state beside
// the largest activations, or with its gradients too (alive at its AdamW) beside the workspace, exceed the
// budget. Longer prefixes hold more, so the scan stops at the first.
void consider_device_prefixes(const OffloadProblem& p, Best& best, PrefetchTiming build) {
  const std::vector<int> order = device_tier_order(p);
  const int64_t most_activations = *std::max_element(p.activation_live.begin(), p.activation_live.end());
  for (bool with_first_op : {false, true}) {
    std::vector<bool> device(p.n_buckets, false);
    int64_t kept = 0, grads = 0;  // the tier's weights and optimizer state; its gradients
    auto add = [&](int b) {
      if (!device[b])
        device[b] = true, kept += p.bucket_bytes[b] + device_state_bytes(p, b), grads += p.bucket_bytes[b];
    };
    auto could_fit = [&] {
      return p.workspace_bytes + std::max(most_activations + kept, kept + grads) <= p.budget_bytes;
    };
    if (with_first_op)
      for (int b : p.op_buckets[0])
        if (p.first_grad_op[b] >= 0) add(b);
    for (size_t n = 0; n <= order.size() && could_fit(); ++n) {
      if (n > 0) add(order[n - 1]);
      if (could_fit() && (n > 0 || with_first_op))
        best.consider([&p, &estimates = best.estimates, device, build] {
          return device_prefix_candidates(p, estimates, device, build);
        });
    }
  }
}

// The device tier and as much of the residency ranking as `budget` holds beside it, counting what stays
// all step (weights, the tier's optimizer state and gradients), the largest activations and the workspace.
std::vector<bool> resident_beside(const OffloadProblem& p, const std::vector<bool>& device,
                                  const std::vector<int>& ranking, int64_t budget) {
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
  const std::vector<bool> none(p.n_buckets, false);
  auto at_every_rung = [&](const std::vector<bool>& resident, int gap) {
    for (int64_t rung : ladder)
      if (!best.settled())
        best.consider(
            [&p, resident, none, rung, gap, build] { return greedy_for(p, resident, none, rung, gap, build); });
  };
  // Nothing resident and every window as short as it can be: the least memory a prefetch schedule needs.
  at_every_rung(none, 1);
  if (best.settled()) return;
  const std::vector<int>& ranking = best.residency_ranking();
  const int64_t most_activations = *std::max_element(p.activation_live.begin(), p.activation_live.end());
  const int prefixes = std::min(p.n_buckets, kPrefixes);
  for (int k = 0; k <= prefixes; ++k) {
    const int size = static_cast<int>(int64_t(k) * p.n_buckets / std::max(1, prefixes));
    std::vector<bool> resident_set(p.n_buckets, false);
    int64_t resident_bytes = 0;
    for (int i = 0; i < size; ++i) resident_set[ranking[i]] = true, resident_bytes += p.bucket_bytes[ranking[i]];
    if (p.workspace_bytes + resident_bytes + most_activations > p.budget_bytes)
      break;  // neither this prefix nor a larger one fits
    at_every_rung(resident_set, kWindowGap);
  }
  if (!mixed_tiers) return;
  // Each device tier of both paths at every rung: every other bucket streamed (both window gaps), and with
  // the most of the residency ranking the rung holds beside it resident too. The paths grow through the
  // ParallelFor (each is a chain of rounds), then their tiers come in the order of the rungs, the Seconds path first.
  const std::vector<std::vector<std::vector<bool>>> paths =
      in_parallel(best.estimates.parallel(), 2 * ladder.size(), [&](size_t i) {
        return device_tier_path(p, best.estimates, i % 2 ? TierGain::SecondsPerByte : TierGain::Seconds, ladder[i / 2],
                                build);
      });
  for (size_t i = 0; i < paths.size(); ++i)
    for (const std::vector<bool>& device : paths[i]) {
      const int64_t rung = ladder[i / 2];
      for (int gap : {kWindowGap, 1})
        best.consider([&p, device, rung, gap, build] { return greedy_for(p, device, device, rung, gap, build); });
      best.consider([&p, &ranking, device, rung, build] {
        return greedy_for(p, resident_beside(p, device, ranking, rung), device, rung, kWindowGap, build);
      });
    }
  consider_device_prefixes(p, best, build);
}

// Greedy's search: the baselines' constructions, then the prefetch schedules for each build and timing.
void search(const OffloadProblem& p, Best& best, bool mixed_tiers, Overlap overlap) {
  if (!p.compact_state) best.consider([&p] { return resident(p); });  // its AdamW runs on the device
  mixed_tiers = mixed_tiers && !p.compact_state;
  best.consider([&p] { return zero_offload(p); });
  // chunk-lru at the budget itself: LRU is a stack algorithm (more room never means more fetches), so
  // this candidate keeps the monotonicity.
  for (int64_t budget : {p.budget_bytes, static_cast<int64_t>(p.budget_bytes * 0.95)})
    if (!best.settled()) best.consider([&p, budget] { return chunk_lru(p, budget); });
  std::vector<Overlap> builds{overlap};
  if (overlap == Overlap::Pipelined) builds.push_back(Overlap::Backward);
  for (Overlap build : builds)
    for (PrefetchTiming::Issue issue :
         {PrefetchTiming::Issue::JustInTime, PrefetchTiming::Issue::Paced, PrefetchTiming::Issue::LatestStart})
      if (!best.settled()) consider_prefetch_schedules(p, best, mixed_tiers, PrefetchTiming{build, issue});
  best.finish();
}

}  // namespace

// Ferry's policy: the candidates above and the baselines, for unlimited memory and a ladder of budgets, three
// prefetch timings each; the fastest the Simulator predicts that fits. What it optimises, and why more budget
// never gives a slower plan: docs/design.md, "What greedy optimises".
PlannedSchedule greedy(const OffloadProblem& p, int64_t red_zone_bytes, bool mixed_tiers, Overlap overlap,
                       const ParallelFor& parallel) {
  Estimates estimates(p, parallel);
  Best best(p, estimates, red_zone_bytes, overlap, {});
  search(p, best, mixed_tiers, overlap);
  if (best.fastest) return std::move(best.fastest->plan);
  // None fits: the search again for the error's figure, laying out every candidate that could lower the
  // smallest peak (the estimates are kept).
  Best smallest(p, estimates, red_zone_bytes, overlap, {.smallest_peak = true});
  search(p, smallest, mixed_tiers, overlap);
  throw BudgetError(shortfall(p, smallest.smallest_peak, "greedy's smallest plan", ""));
}

bool greedy_fits(const OffloadProblem& p, int64_t red_zone_bytes, bool mixed_tiers, Overlap overlap,
                 const ParallelFor& parallel) {
  if (minimum_device_bytes(p) > p.budget_bytes) return false;  // as make_schedule
  Estimates estimates(p, parallel);
  Best best(p, estimates, red_zone_bytes, overlap, {.stop_at_first_fit = true});
  search(p, best, mixed_tiers, overlap);
  return best.fastest.has_value();
}

}  // namespace ferry::offload::detail
