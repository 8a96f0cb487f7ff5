// Shared by the offload and engine tests: finds, in a schedule and its device memory, the prefetches that fill
// bytes held by gradients released at the same schedule point. Those prefetches must wait for the gradients'
// copy to the host.
#pragma once

#include <algorithm>
#include <vector>

#include "offload/device_memory.h"
#include "offload/schedule.h"

namespace ferry::testing {

// How many prefetches write into the bytes of gradients released at their own point. With unwaited_only, a
// prefetch counts only when nothing earlier waits for those gradients' copy. The d2h stream copies in order,
// so an earlier release waits for every copy queued before its own.
inline int prefetches_into_released_gradients(const offload::Schedule& schedule, const offload::DeviceMemory& m, int n_buckets,
                                              bool unwaited_only) {
  using offload::Action;
  std::vector<size_t> windows, grads(static_cast<size_t>(n_buckets), 0);
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    if (m.tensors[i].kind == offload::DeviceTensor::Kind::Weights) windows.push_back(i);
    if (m.tensors[i].kind == offload::DeviceTensor::Kind::Grads) grads[m.tensors[i].index] = i;
  }
  auto overlap = [&](size_t a, size_t b) {
    return m.layout.offsets[a] < m.layout.offsets[b] + m.tensors[b].life.bytes &&
           m.layout.offsets[b] < m.layout.offsets[a] + m.tensors[a].life.bytes;
  };
  std::vector<int> offload_order(static_cast<size_t>(n_buckets), -1);  // position in the d2h stream
  int copies = 0, last_waited = -1, found = 0;                          // last_waited: the latest d2h copy compute waited for
  size_t window = 0;
  for (const auto& actions : schedule.before) {
    for (const Action& a : actions)
      if (a.kind == Action::Kind::OffloadGrads) offload_order[a.bucket] = copies++;
    for (const Action& a : actions) {
      if (a.kind != Action::Kind::Prefetch) continue;
      const size_t w = windows[window++];
      for (const Action& r : actions)
        found += r.kind == Action::Kind::ReleaseGrads && (!unwaited_only || offload_order[r.bucket] > last_waited) &&
                 overlap(w, grads[r.bucket]);
    }
    for (const Action& a : actions)
      if (a.kind == Action::Kind::ReleaseGrads) last_waited = std::max(last_waited, offload_order[a.bucket]);
  }
  return found;
}

}  // namespace ferry::testing
