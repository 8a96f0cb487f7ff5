// make_device: the one place that turns a run's choice of device into a Device, so that the trainer, the
// benchmarks and the tests never construct an implementation themselves; resolve_device: which device
// `device: auto | cpu | cuda` means on this machine.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

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

// What this machine offers a run: whether the build has CUDA, how many CUDA devices the process sees
// (CUDA_VISIBLE_DEVICES applies) and the first one's name (a run trains on the first).
struct VisibleDevices {
  bool cuda_built = false;
  int cuda_devices = 0;
  std::string first_cuda_name;
  std::optional<std::string> cuda_visible_devices;  // the environment variable, when set
};
VisibleDevices visible_devices();

// The device a run trains on, and why in words for its start-up line: "cuda (NVIDIA H100 80GB HBM3)",
// "cpu (no CUDA device visible)", "cpu (this build has no CUDA)".
struct ResolvedDevice {
  DeviceChoice::Kind kind = DeviceChoice::Kind::Host;
  std::string note;
};
// `requested` is the config's device: auto takes the first CUDA device when the build has CUDA and one is
// visible, else the host device; cpu is the host device; cuda without one is refused, saying why.
ResolvedDevice resolve_device(const std::string& requested, const VisibleDevices& seen);
// The same on this machine (visible_devices()).
ResolvedDevice resolve_device(const std::string& requested);

// Throws with the reason when the device cannot be made (a build without CUDA, no such GPU, an arena
// larger than its memory).
std::unique_ptr<Device> make_device(const DeviceChoice& choice);

}  // namespace ferry::device
