// Planner: greedy-by-size placement into the best-fitting gap among time-overlapping tensors.
#include "memory/planner.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>


namespace ferry::memory {
namespace {

int64_t align(int64_t v, int64_t alignment) { return (v + alignment - 1) & ~(alignment - 1); }

// Places tensors in the given order; each goes into the smallest gap between time-overlapping tensors
// already placed that holds it, or above them all.
ArenaLayout place(std::span<const TensorLifetime> tensors, const std::vector<int>& order) {
  ArenaLayout plan;
  plan.offsets.assign(tensors.size(), 0);
  // Placed tensors in offset order, as parallel arrays. Each placement first picks out, without branches,
  // the placed tensors alive together with the new one (a few hundred of thousands, typically), then
  // walks only those for the best gap: the pick is the planner's inner loop and runs at about a cycle
  // per placed tensor.
  std::vector<int64_t> offset, end;
  std::vector<int> first, last;
  std::vector<uint32_t> meets(tensors.size());
  for (int i : order) {
    const TensorLifetime& t = tensors[i];
    if (t.bytes == 0) continue;
    const size_t n = offset.size();
    size_t k = 0;
    for (size_t j = 0; j < n; ++j) {
      meets[k] = static_cast<uint32_t>(j);
      k += (first[j] <= t.last) & (t.first <= last[j]);
    }
    int64_t best_offset = -1, best_gap = INT64_MAX, cursor = 0;
    for (size_t q = 0; q < k; ++q) {
      const size_t j = meets[q];
      const int64_t start = align(cursor, t.alignment);
      const int64_t gap = offset[j] - start;
      if (gap >= t.bytes && gap < best_gap) best_gap = gap, best_offset = start;
      cursor = std::max(cursor, end[j]);
    }
    if (best_offset < 0) best_offset = align(cursor, t.alignment);
    plan.offsets[i] = best_offset;
    plan.peak = std::max(plan.peak, best_offset + t.bytes);
    const auto at = std::upper_bound(offset.begin(), offset.end(), best_offset) - offset.begin();
    offset.insert(offset.begin() + at, best_offset);
    end.insert(end.begin() + at, best_offset + t.bytes);
    first.insert(first.begin() + at, t.first);
    last.insert(last.begin() + at, t.last);
  }
  return plan;
}

// The tensors with every in-place pair made one block: the taken tensor lives on to the taker's last use, as
// large as the larger of the two, and the taker takes no room of its own. Throws for a pair the op list does not
// allow (the taken tensor alive after the taker's first op, a chain, an index out of range).
std::vector<TensorLifetime> merge_in_place(std::span<const TensorLifetime> tensors) {
  std::vector<TensorLifetime> merged(tensors.begin(), tensors.end());
  std::vector<bool> taken(tensors.size(), false);
  for (size_t t = 0; t < tensors.size(); ++t) {
    const int s = tensors[t].in_place_of;
    if (s < 0) continue;
    if (s >= static_cast<int>(tensors.size()) || static_cast<size_t>(s) == t || tensors[s].in_place_of >= 0 ||
        taken[s] || tensors[s].last != tensors[t].first)
      throw std::invalid_argument("planner: tensor " + std::to_string(t) + " is written in place of tensor " +
                                  std::to_string(s) +
                                  ", which must be another tensor, written in place of none, taken "
                                  "by no other, and last used by the op that first uses this one");
    taken[s] = true;
    merged[s].last = tensors[t].last;
    merged[s].bytes = std::max(tensors[s].bytes, tensors[t].bytes);
    merged[s].alignment = std::max(tensors[s].alignment, tensors[t].alignment);
    merged[t].bytes = 0;
  }
  return merged;
}

}  // namespace

std::vector<int64_t> Planner::live_bytes(std::span<const TensorLifetime> given, int ops) {
  const std::vector<TensorLifetime> tensors = merge_in_place(given);
  std::vector<int64_t> live(static_cast<size_t>(ops) + 1, 0);  // starts and ends, then their running sum
  for (const auto& t : tensors) {
    if (t.bytes == 0) continue;
    if (t.last >= ops) throw std::invalid_argument("planner: a tensor lives past op " + std::to_string(ops - 1));
    live[t.first] += t.bytes;
    live[t.last + 1] -= t.bytes;
  }
  std::partial_sum(live.begin(), live.end(), live.begin());
  live.pop_back();
  return live;
}

int64_t Planner::lower_bound(std::span<const TensorLifetime> tensors) {
  int ops = 1;
  for (const auto& t : tensors) ops = std::max(ops, t.last + 1);
  const std::vector<int64_t> live = live_bytes(tensors, ops);
  return *std::max_element(live.begin(), live.end());
}

ArenaLayout Planner::plan(std::span<const TensorLifetime> given) {
  for (const auto& t : given) {
    if (t.bytes < 0 || t.first < 0 || t.last < t.first || t.alignment <= 0 || (t.alignment & (t.alignment - 1)))
      throw std::invalid_argument("planner: each tensor needs bytes >= 0, 0 <= first <= last, a power-of-two alignment");
  }
  const std::vector<TensorLifetime> tensors = merge_in_place(given);
  const int n = static_cast<int>(tensors.size());
  auto ordered = [&](auto&& before) {
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), before);
    return order;
  };
  auto length = [&](int i) { return int64_t(tensors[i].last) - tensors[i].first + 1; };
  // Largest first, then: longest-lived first / earliest first / largest area (bytes x lifetime) first.
  std::vector<std::vector<int>> orders;
  orders.push_back(ordered([&](int a, int b) {
    return tensors[a].bytes != tensors[b].bytes ? tensors[a].bytes > tensors[b].bytes : length(a) > length(b);
  }));
  if (n <= 4000) {  // the alternatives cost a full placement each: only where that stays cheap
    orders.push_back(ordered([&](int a, int b) {
      return tensors[a].bytes != tensors[b].bytes ? tensors[a].bytes > tensors[b].bytes
                                                  : tensors[a].first < tensors[b].first;
    }));
    orders.push_back(ordered([&](int a, int b) {
      return double(tensors[a].bytes) * length(a) > double(tensors[b].bytes) * length(b);
    }));
    orders.push_back(ordered([&](int a, int b) { return length(a) > length(b); }));
  }
  ArenaLayout best;
  for (const auto& order : orders) {
    ArenaLayout p = place(tensors, order);
    if (best.offsets.empty() || p.peak < best.peak) best = std::move(p);
  }
  if (best.offsets.empty()) best.offsets.assign(tensors.size(), 0);
  for (size_t t = 0; t < given.size(); ++t)
    if (given[t].in_place_of >= 0) best.offsets[t] = best.offsets[given[t].in_place_of];
  best.lower_bound = lower_bound(given);
  return best;
}

std::string Planner::check(std::span<const TensorLifetime> tensors, const ArenaLayout& plan) {
  if (plan.offsets.size() != tensors.size()) return "plan has " + std::to_string(plan.offsets.size()) + " offsets for " +
                                                    std::to_string(tensors.size()) + " tensors";
  // Sweep ops in order, keeping the live tensors sorted by offset; check each new one against its neighbours.
  std::vector<int> by_first(tensors.size());
  std::iota(by_first.begin(), by_first.end(), 0);
  std::sort(by_first.begin(), by_first.end(), [&](int a, int b) { return tensors[a].first < tensors[b].first; });
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    if (plan.offsets[i] < 0 || plan.offsets[i] % t.alignment != 0)
      return "tensor " + std::to_string(i) + " at offset " + std::to_string(plan.offsets[i]) + " breaks its alignment";
    if (plan.offsets[i] + t.bytes > plan.peak) return "tensor " + std::to_string(i) + " ends beyond the peak";
  }
  // O(n log n + overlaps): compare each tensor with the earlier-starting tensors still alive.
  std::vector<int> live;
  for (int i : by_first) {
    const auto& t = tensors[i];
    if (t.bytes == 0) continue;
    live.erase(std::remove_if(live.begin(), live.end(), [&](int j) { return tensors[j].last < t.first; }), live.end());
    for (int j : live) {
      if ((t.in_place_of == j || tensors[j].in_place_of == i) && plan.offsets[i] == plan.offsets[j]) continue;
      const int64_t a0 = plan.offsets[i], a1 = a0 + t.bytes, b0 = plan.offsets[j], b1 = b0 + tensors[j].bytes;
      if (a0 < b1 && b0 < a1)
        return "tensors " + std::to_string(j) + " and " + std::to_string(i) + " are alive together and overlap in memory";
    }
    live.push_back(i);
  }
  return "";
}

}  // namespace ferry::memory
