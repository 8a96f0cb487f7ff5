// make_device: the host device always; the CUDA device in builds with CUDA. resolve_device: the config's
// device against what the machine offers.
#include "engine/device/make_device.h"

#include <cstdlib>
#include <stdexcept>

#include "engine/device/cuda_devices.h"
#include "engine/device/host_device.h"
#ifdef FERRY_WITH_CUDA
#include "engine/device/cuda_device.h"
#endif

namespace ferry::device {
namespace {

constexpr const char* kNoCudaBuild = "this build has no CUDA (configure with -DFERRY_CUDA=ON where nvcc exists)";

// Why no CUDA device is visible, with CUDA_VISIBLE_DEVICES when it is set (it may be what hides the GPUs).
std::string none_visible(const VisibleDevices& seen) {
  return "no CUDA device visible" + (seen.cuda_visible_devices ? "; CUDA_VISIBLE_DEVICES is '" + *seen.cuda_visible_devices + "'" : "");
}

}  // namespace

VisibleDevices visible_devices() {
  VisibleDevices seen;
#ifdef FERRY_WITH_CUDA
  seen.cuda_built = true;
#endif
  seen.cuda_devices = cuda_device_count();
#ifdef FERRY_WITH_CUDA
  if (seen.cuda_devices > 0) seen.first_cuda_name = cuda_device_name(0);
#endif
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) seen.cuda_visible_devices = v;
  return seen;
}

ResolvedDevice resolve_device(const std::string& requested, const VisibleDevices& seen) {
  const bool gpu = seen.cuda_built && seen.cuda_devices > 0;
  if (requested == "cpu") return {DeviceChoice::Kind::Host, "cpu (as configured)"};
  if (requested == "cuda") {
    if (!seen.cuda_built) throw std::runtime_error(std::string("device: cuda: ") + kNoCudaBuild + "; use device: auto or cpu");
    if (!gpu) throw std::runtime_error("device: cuda: " + none_visible(seen) + " (no driver, no GPU, or CUDA_VISIBLE_DEVICES hides it); use device: auto or cpu");
    return {DeviceChoice::Kind::Cuda, "cuda (" + seen.first_cuda_name + ")"};
  }
  if (requested != "auto") throw std::invalid_argument("device: '" + requested + "'; expected auto, cpu or cuda");
  if (gpu) return {DeviceChoice::Kind::Cuda, "cuda (" + seen.first_cuda_name + ")"};
  return {DeviceChoice::Kind::Host, seen.cuda_built ? "cpu (" + none_visible(seen) + ")" : "cpu (this build has no CUDA)"};
}

ResolvedDevice resolve_device(const std::string& requested) {
  if (requested == "cpu") return resolve_device(requested, {});  // asks no driver
  return resolve_device(requested, visible_devices());
}

std::unique_ptr<Device> make_device(const DeviceChoice& choice) {
  if (choice.kind == DeviceChoice::Kind::Host)
    return std::make_unique<HostDevice>(
        HostDevice::Options{choice.arena_bytes, choice.link_gbps, choice.compute_threads, choice.trace, choice.d2h_link_gbps});
#ifdef FERRY_WITH_CUDA
  return std::make_unique<CudaDevice>(CudaDevice::Options{choice.cuda_ordinal, choice.arena_bytes});
#else
  throw std::runtime_error(std::string("device: cuda: ") + kNoCudaBuild);
#endif
}

}  // namespace ferry::device
