// greedy_for: every travelling bucket's windows of use, each prefetched as its timing says (ExpectedLink, the
// h2d stream on the step's ideal timeline) and where memory allows, released after its last use.
#include "offload/greedy_schedule.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace ferry::offload::detail {
namespace {

// A travelling bucket's window: ops using it at most `gap` ops apart.
struct Window {
  int bucket, first, last;
};

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

// With the pipelined update (Overlap::Pipelined), a bucket's first window cannot arrive before the CPU has
// updated it: pipelined_ready gives when, on the ideal timeline of this step.
std::vector<double> pipelined_ready(const OffloadProblem& p, const std::vector<bool>& device) {
  std::vector<double> ready(p.n_buckets, -INFINITY);
  double device_adam = 0;  // the previous step's device AdamW runs first on the compute stream
  for (int b = 0; b < p.n_buckets; ++b)
    if (device[b] && p.first_grad_op[b] >= 0)
      device_adam += double(p.bucket_params[b]) / p.cost.device_adam_params_per_s;
  std::vector<int> updated_on_cpu;
  for (int b = 0; b < p.n_buckets; ++b)
    if (!device[b] && p.first_grad_op[b] >= 0) updated_on_cpu.push_back(b);
  double updated = -device_adam;
  for (int b : in_first_use_order(p, std::move(updated_on_cpu)))
    ready[b] = updated += double(p.bucket_params[b]) / p.cpu_adam_params_per_s();
  return ready;
}

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
      next = latest_start_[i] =
          std::min(t_[windows[i].first], next) - p.cost.h2d.seconds(p.bucket_bytes[windows[i].bucket]);
  }

  double at(int point) const { return t_[point] + shift_; }

  // The point where a walk back from `point` while `go_back` holds, not below `lowest`, stops: go_back
  // holds from some point on (it asks whether at() is above a time, and at() never decreases along the
  // step), so a bisection finds it. The walk itself, one op at a time, took most of greedy_for on deep models.
  template <class GoBack>
  static int walk_back(int point, int lowest, GoBack go_back) {
    if (point <= lowest || !go_back(point)) return point;
    int lo = lowest, hi = point - 1;  // the largest point in [lowest, point) where go_back fails, else lowest
    while (lo < hi) {
      const int mid = lo + (hi - lo + 1) / 2;
      if (go_back(mid)) hi = mid - 1;
      else lo = mid;
    }
    return lo;
  }

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
      return walk_back(point, released, [&](int at_point) { return at(at_point) > start; });
    }
    // The latest point whose copy still lands in time, backing off only while that starts the copy sooner
    // (not before its update, nor, paced, before the link is free).
    const double copy = p_.cost.h2d.seconds(p_.bucket_bytes[w.bucket]);
    const double floor = std::max(earliest, timing_.issue == PrefetchTiming::Issue::Paced ? h2d_free_ : -INFINITY);
    return walk_back(point, released, [&](int at_point) {
      return at(at_point) > floor && std::max(at(at_point), h2d_free_) + copy > at(w.first);
    });
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
std::vector<int64_t> bytes_before_windows(const OffloadProblem& p, const std::vector<bool>& resident,
                                          const std::vector<bool>& device, const std::vector<int64_t>& grads_live) {
  int64_t resident_bytes = 0;
  for (int b = 0; b < p.n_buckets; ++b)
    if (resident[b]) resident_bytes += p.bucket_bytes[b] + (device[b] ? device_state_bytes(p, b) : 0);
  std::vector<int64_t> device_grads(p.n_ops + 1, 0);  // from each op on: the device tier's gradients written so far
  for (int b = 0; b < p.n_buckets; ++b)
    if (device[b] && p.first_grad_op[b] >= 0) device_grads[p.first_grad_op[b]] += p.bucket_bytes[b];
  std::vector<int64_t> used(p.n_ops);
  int64_t grads = 0;
  for (int i = 0; i < p.n_ops; ++i)
    used[i] = p.workspace_bytes + p.activation_live[i] + grads_live[i] + resident_bytes + (grads += device_grads[i]);
  return used;
}

// The schedule of `resident` and `device` with the CPU optimizer's actions and nothing travelling yet, and
// the bytes it holds at each op (bytes_before_windows).
std::vector<int64_t> tiers_without_windows(const OffloadProblem& p, const std::vector<bool>& resident,
                                           const std::vector<bool>& device, Schedule& s) {
  s.resident = resident;
  s.device_optimizer = device;
  if (std::find(device.begin(), device.end(), true) != device.end())
    s.before[p.n_ops].push_back({Action::Kind::DeviceAdam, -1});
  return bytes_before_windows(p, resident, device, add_cpu_optimizer(p, s));
}

}  // namespace

int64_t least_greedy_bytes(const OffloadProblem& p, const std::vector<bool>& resident,
                           const std::vector<bool>& device) {
  Schedule s = empty_schedule(p, Policy::Greedy, "");
  const std::vector<int64_t> used = tiers_without_windows(p, resident, device, s);
  int64_t least = 0;
  for (int i = 0; i < p.n_ops; ++i) {
    int64_t at = used[i];
    for (int b : p.op_buckets[i])
      if (!resident[b]) at += p.bucket_bytes[b];
    least = std::max(least, at);
  }
  return least;
}

void order_actions(Schedule& s) {
  auto before = [](const Action& a, const Action& b) {
    auto rank = [](Action::Kind k) { return k == Action::Kind::Release ? 0 : k == Action::Kind::Wait ? 2 : 1; };
    return rank(a.kind) < rank(b.kind);
  };
  // Most points are in order already: sorting them anyway (stable_sort allocates its buffer) took a tenth
  // of greedy's search on deep models.
  for (auto& actions : s.before)
    if (!std::is_sorted(actions.begin(), actions.end(), before))
      std::stable_sort(actions.begin(), actions.end(), before);
}

Schedule greedy_for(const OffloadProblem& p, const std::vector<bool>& resident, const std::vector<bool>& device,
                    int64_t budget, int gap, PrefetchTiming timing) {
  const int kept = static_cast<int>(std::count(resident.begin(), resident.end(), true));
  const int updated_there = static_cast<int>(std::count(device.begin(), device.end(), true));
  Schedule s = empty_schedule(
      p, Policy::Greedy,
      "prefetch schedule, " + std::to_string(kept) + " of " + std::to_string(p.n_buckets) + " buckets resident" +
          (updated_there > 0 ? ", " + std::to_string(updated_there) + " updated on the device" : "") +
          (gap == 1 ? ", windows of consecutive uses" : ""));
  std::vector<int64_t> used = tiers_without_windows(p, resident, device, s);
  std::vector<int> released_at(p.n_buckets, 0);  // a bucket's next window may not start before this point
  std::vector<double> ready =
      timing.overlap == Overlap::Pipelined ? pipelined_ready(p, device) : std::vector<double>(p.n_buckets, -INFINITY);
  const std::vector<Window> windows = windows_of(p, resident, gap);
  ExpectedLink link(p, timing, windows);
  for (size_t wi = 0; wi < windows.size(); ++wi) {  // in order of first use
    const Window& w = windows[wi];
    const int64_t bytes = p.bucket_bytes[w.bucket];
    const double earliest = ready[w.bucket];
    ready[w.bucket] = -INFINITY;  // its later windows carry the updated weights already
    int point = link.point(w, wi, released_at[w.bucket], earliest);
    // Then forward to the earliest point memory allows (never past the window's first op): just after the
    // last op up to the window's end that has no room for the bucket. One pass: a point-by-point search that
    // rechecked the rest of the window at each point took most of the planning time of deep models.
    for (int i = w.last; i >= point; --i)
      if (used[i] + bytes > budget) {
        point = std::min(w.first, i + 1);
        break;
      }
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

}  // namespace ferry::offload::detail
