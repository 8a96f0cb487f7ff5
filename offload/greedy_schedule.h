// Greedy's prefetch schedule for given tiers (greedy_for) and how it times each window's copy; internal to
// offload/, used by greedy's search (greedy.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "offload/policy_parts.h"

namespace ferry::offload::detail {

// What the device tier keeps beside a bucket's weights: the fp32 master, m and v, and the fp32 gradient
// sums when micro-batches accumulate (DeviceMemory's OptimizerState and GradSum).
inline int64_t device_state_bytes(const OffloadProblem& p, int b) {
  return (p.grad_accum > 1 ? 16 : 12) * p.bucket_numel(b);
}

// A travelling bucket's windows: its uses at most kWindowGap ops apart. Wider windows save trips over the
// link; with gap 1 a bucket stays on the device only through runs of consecutive ops that use it.
constexpr int kWindowGap = 4;
// A budget no plan reaches, with room to add to.
constexpr int64_t kUnlimitedBytes = INT64_MAX / 4;

// Within a point: weight releases first (they free room), then everything else in the order it was
// added (a bucket's gradient release follows its offload), then waits.
void order_actions(Schedule& s);

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

// Ferry's schedule for given tiers: the device tier (`device`: AdamW on the device, after the last op)
// and the other resident buckets stay; every other bucket travels once per window of uses, prefetched just
// in time on the ideal timeline (its copy, queued behind the ones before it, lands when the window's first
// op would start; where it cannot, issued earlier as `timing` says), later if memory forbids that point,
// and released right after the window's last use. `resident` includes `device`.
Schedule greedy_for(const OffloadProblem& p, const std::vector<bool>& resident, const std::vector<bool>& device,
                    int64_t budget, int gap = kWindowGap, PrefetchTiming timing = {});

// The least device bytes greedy_for's schedule of these tiers can hold at its fullest op (whatever its budget):
// what stays all step (the tiers, the activations, the gradient buffers) with each travelling bucket present
// only at the ops that use it.
int64_t least_greedy_bytes(const OffloadProblem& p, const std::vector<bool>& resident, const std::vector<bool>& device);

}  // namespace ferry::offload::detail
