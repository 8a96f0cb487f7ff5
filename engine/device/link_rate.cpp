// measure_link_gbps: timed copies between a pinned pool of the device's own and its arena;
// measure_device_adamw_params_per_s: timed AdamW updates of one bucket in its arena.
#include "engine/device/link_rate.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <utility>
#include <vector>

#include "memory/pinned_pool.h"

namespace ferry::device {
namespace {

constexpr int64_t kAlign = 256;
int64_t aligned(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// One bucket's fp32 master, m and v, and its gradients and working copy in `precision`.
int64_t bucket_state_bytes(int64_t params, DType precision) { return 3 * aligned(params * 4) + 2 * aligned(params * dtype_bytes(precision)); }

// The median of `reps` timings of `queue` (work queued on `stream`) between timed events, after one untimed
// (first touch, kernels loaded, driver set-up).
template <class Queue>
double median_timed_seconds(Device& device, Stream stream, int reps, Queue&& queue) {
  std::vector<double> seconds;
  for (int r = 0; r <= reps; ++r) {
    const EventPtr before = device.record_timed(stream);
    queue();
    const EventPtr after = device.record_timed(stream);
    device.synchronize(after);
    if (r > 0) seconds.push_back(device.elapsed_seconds(before, after));
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

double measure_link_gbps(Device& device, Stream stream, int64_t bytes, int reps) {
  if (stream != Stream::H2D && stream != Stream::D2H) throw std::invalid_argument("measure_link_gbps: a copy stream (H2D or D2H)");
  if (bytes <= 0 || bytes > device.arena().size() || reps < 1)
    throw std::invalid_argument(fmt::format("measure_link_gbps: {} bytes (1 to the arena's {}), {} reps (>= 1)", bytes,
                                            device.arena().size(), reps));
  const std::unique_ptr<memory::PinnedHostPool> pool = device.make_host_pool(bytes);
  std::byte* on_device = device.arena().data();
  void* dst = stream == Stream::H2D ? static_cast<void*>(on_device) : static_cast<void*>(pool->data());
  const void* src = stream == Stream::H2D ? static_cast<const void*>(pool->data()) : static_cast<const void*>(on_device);
  const double seconds = median_timed_seconds(device, stream, reps, [&] { device.copy(stream, dst, src, bytes, "link rate"); });
  return static_cast<double>(bytes) / seconds / 1e9;
}

int64_t device_adamw_arena_bytes(int64_t params, DType precision, int64_t workspace_bytes) {
  return bucket_state_bytes(params, precision) + aligned(workspace_bytes);
}

double measure_device_adamw_params_per_s(Device& device, int64_t params, DType precision, int64_t workspace_bytes, int reps) {
  const int64_t state = bucket_state_bytes(params, precision);
  if (params <= 0 || workspace_bytes < 0 || device_adamw_arena_bytes(params, precision, workspace_bytes) > device.arena().size() || reps < 1)
    throw std::invalid_argument(fmt::format("measure_device_adamw_params_per_s: {} parameters ({} bytes) and a {}-byte workspace in "
                                            "the arena's {}, {} reps (>= 1)",
                                            params, state, workspace_bytes, device.arena().size(), reps));
  std::byte* at = device.arena().data();
  auto next = [&at](int64_t bytes) { return std::exchange(at, at + aligned(bytes)); };
  const Device::OptimizerBucket bucket{.master = reinterpret_cast<float*>(next(params * 4)),
                                       .m = reinterpret_cast<float*>(next(params * 4)),
                                       .v = reinterpret_cast<float*>(next(params * 4)),
                                       .grad = next(params * dtype_bytes(precision)),
                                       .grad_type = precision,
                                       .working = next(params * dtype_bytes(precision)),
                                       .working_type = precision,
                                       .numel = params};
  // Zeros: finite gradients, so that every update runs rather than a skipped step's shortcut.
  device.zero(Stream::Compute, device.arena().data(), state, "device AdamW rate: state");
  if (workspace_bytes > 0) device.bind_workspace(device.arena().data() + state, workspace_bytes);
  cpu_optim::StepDecision decision;
  int64_t step = 0;
  const double seconds = median_timed_seconds(device, Stream::Compute, reps, [&] {
    device.adamw({bucket}, cpu_optim::AdamWHyper{}, ++step, 1e-4, 1.0f, 1.0f, &decision, "device AdamW rate");
  });
  if (workspace_bytes > 0) device.bind_workspace(nullptr, 0);
  return static_cast<double>(params) / seconds;
}

}  // namespace ferry::device
