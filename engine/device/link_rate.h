// measure_link_gbps: a device's host<->device copy rate, timed with its own timed events on its copy
// streams, from its pinned host memory into its arena (PCIe on the CUDA device; memcpy, or the throttled
// link, on the host device). The cost model of a CUDA run takes it at start-up instead of an assumed figure.
#pragma once

#include <cstdint>

#include "engine/device/device.h"

namespace ferry::device {

// GB/s (1e9 bytes a second) of `bytes`-long copies over `stream` (Stream::H2D or Stream::D2H): the median of
// `reps` timed copies after one untimed. The arena must hold `bytes`; its contents are overwritten.
double measure_link_gbps(Device& device, Stream stream, int64_t bytes, int reps);

}  // namespace ferry::device
