// measure_link_gbps: timed copies between a pinned pool of the device's own and its arena.
#include "engine/device/link_rate.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "memory/pinned_pool.h"

namespace ferry::device {

double measure_link_gbps(Device& device, Stream stream, int64_t bytes, int reps) {
  if (stream != Stream::H2D && stream != Stream::D2H) throw std::invalid_argument("measure_link_gbps: a copy stream (H2D or D2H)");
  if (bytes <= 0 || bytes > device.arena().size() || reps < 1)
    throw std::invalid_argument(fmt::format("measure_link_gbps: {} bytes (1 to the arena's {}), {} reps (>= 1)", bytes,
                                            device.arena().size(), reps));
  const std::unique_ptr<memory::PinnedHostPool> pool = device.make_host_pool(bytes);
  std::byte* on_device = device.arena().data();
  void* dst = stream == Stream::H2D ? static_cast<void*>(on_device) : static_cast<void*>(pool->data());
  const void* src = stream == Stream::H2D ? static_cast<const void*>(pool->data()) : static_cast<const void*>(on_device);
  std::vector<double> gbps;
  for (int r = 0; r <= reps; ++r) {  // the first copy untimed: first-touch and driver set-up
    const EventPtr before = device.record_timed(stream);
    device.copy(stream, dst, src, bytes, "link rate");
    const EventPtr after = device.record_timed(stream);
    device.synchronize(after);
    if (r > 0) gbps.push_back(static_cast<double>(bytes) / device.elapsed_seconds(before, after) / 1e9);
  }
  std::sort(gbps.begin(), gbps.end());
  return gbps[gbps.size() / 2];
}

}  // namespace ferry::device
