// make_device: the host device always; the CUDA device in builds with CUDA.
#include "engine/device/make_device.h"

#include <stdexcept>

#include "engine/device/host_device.h"
#ifdef FERRY_WITH_CUDA
#include "engine/device/cuda_device.h"
#endif

namespace ferry::device {

std::unique_ptr<Device> make_device(const DeviceChoice& choice) {
  if (choice.kind == DeviceChoice::Kind::Host)
    return std::make_unique<HostDevice>(
        HostDevice::Options{choice.arena_bytes, choice.link_gbps, choice.compute_threads, choice.trace, choice.d2h_link_gbps});
#ifdef FERRY_WITH_CUDA
  return std::make_unique<CudaDevice>(CudaDevice::Options{choice.cuda_ordinal, choice.arena_bytes});
#else
  throw std::runtime_error("device: cuda: this build has no CUDA (configure with -DFERRY_CUDA=ON where nvcc exists)");
#endif
}

}  // namespace ferry::device
