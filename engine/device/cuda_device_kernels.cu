// The CUDA device's one kernel of its own: a stream waits for host work by spinning on a pinned flag.
#include <cuda_runtime.h>

namespace ferry::device {
namespace {

__global__ void wait_for_flag(volatile int* flag) {
  while (*flag == 0) __nanosleep(1000);
}

}  // namespace

cudaError_t launch_wait_for_flag(int* device_flag, cudaStream_t stream) {
  wait_for_flag<<<1, 1, 0, stream>>>(device_flag);
  return cudaGetLastError();
}

}  // namespace ferry::device
