// cuda_device_count through the CUDA runtime; a missing driver or GPU counts as zero devices, not an error.
#include <cuda_runtime.h>

#include "engine/device/cuda_devices.h"

namespace ferry::device {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error for later callers
    return 0;
  }
  return n;
}

}  // namespace ferry::device
