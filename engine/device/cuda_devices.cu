// cuda_device_count, cuda_device_name and cuda_memory through the CUDA runtime; a missing driver or GPU
// counts as zero devices, not an error.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "engine/device/cuda_devices.h"

namespace ferry::device {
namespace {

void check(cudaError_t status, const std::string& what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();
  throw std::runtime_error(what + ": " + cudaGetErrorString(status));
}

}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error for later callers
    return 0;
  }
  return n;
}

std::string cuda_device_name(int ordinal) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, ordinal), "CUDA device " + std::to_string(ordinal) + ": its properties");
  return prop.name;
}

CudaMemory cuda_memory(int ordinal) {
  check(cudaSetDevice(ordinal), "CUDA device " + std::to_string(ordinal));
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "CUDA device " + std::to_string(ordinal) + ": its free memory (cudaMemGetInfo)");
  return {static_cast<int64_t>(free), static_cast<int64_t>(total)};
}

}  // namespace ferry::device
