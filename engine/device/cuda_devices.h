// What the CUDA runtime says of this process's GPUs, without making a device: how many (what `device: auto`
// looks at; CUDA_VISIBLE_DEVICES applies), one's name, and its free memory (what `offload.gpu_budget: auto`
// takes). Builds without CUDA see none.
#pragma once

#include <cstdint>
#include <string>

namespace ferry::device {

struct CudaMemory {
  int64_t free_bytes = 0, total_bytes = 0;
};

#ifdef FERRY_WITH_CUDA
int cuda_device_count();                 // 0 when there is no driver or no device
std::string cuda_device_name(int ordinal);  // "NVIDIA H100 80GB HBM3"; throws when there is no such device
CudaMemory cuda_memory(int ordinal);     // cudaMemGetInfo on that device; throws when it cannot be asked
#else
inline int cuda_device_count() { return 0; }
#endif

}  // namespace ferry::device
