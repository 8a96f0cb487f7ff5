// A device's rates timed on the device itself, with its own timed events: measure_link_gbps, its host<->device
// copy rate from its pinned host memory into its arena (PCIe on the CUDA device; memcpy, or the throttled link,
// on the host device), and measure_device_adamw_params_per_s, its AdamW's. A CUDA run's cost model takes them at
// start-up instead of assumed figures.
#pragma once

#include <cstdint>

#include "engine/device/device.h"
#include "memory/dtype.h"

namespace ferry::device {

// GB/s (1e9 bytes a second) of `bytes`-long copies over `stream` (Stream::H2D or Stream::D2H): the median of
// `reps` timed copies after one untimed. The arena must hold `bytes`; its contents are overwritten.
double measure_link_gbps(Device& device, Stream stream, int64_t bytes, int reps);

// The arena measure_device_adamw_params_per_s needs: one bucket of `params` parameters (fp32 master, m and v, the
// gradients and working copy in `precision`), then the workspace.
int64_t device_adamw_arena_bytes(int64_t params, DType precision, int64_t workspace_bytes);

// Parameters a second of Device::adamw (gradient statistics, the step decision, the update and its working
// copy) over one bucket of `params` parameters laid out from the arena's start, with `workspace_bytes` after it
// bound as the device's workspace (device_adamw_arena_bytes in all) (the CUDA device's AdamW keeps its statistics
// there): the median of `reps` timed updates after one untimed. The arena's contents are overwritten.
double measure_device_adamw_params_per_s(Device& device, int64_t params, DType precision, int64_t workspace_bytes, int reps);

}  // namespace ferry::device
