// make_device: the one place that turns a run's choice of device into a Device, so that the trainer, the
// benchmarks and the tests never construct an implementation themselves.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/device/device.h"
#include "engine/device/trace.h"

namespace ferry::device {

struct DeviceChoice {
  using Kind = DeviceKind;
  Kind kind = Kind::Host;
  int64_t arena_bytes = 0;      // the plan's arena: the one device allocation
  Trace* trace = nullptr;       // null: no trace
  // The host device:
  int compute_threads = 0;      // threads of the compute stream's ops; 0: leave the default
  double link_gbps = 0;         // copies throttled to this many GB/s each way, like PCIe; 0: memcpy speed
  double d2h_link_gbps = -1;    // tests: the link back at another rate; < 0: link_gbps
  // The CUDA device:
  int cuda_ordinal = 0;
};

// Throws with the reason when the device cannot be made (a build without CUDA, no such GPU, an arena
// larger than its memory).
std::unique_ptr<Device> make_device(const DeviceChoice& choice);

}  // namespace ferry::device
