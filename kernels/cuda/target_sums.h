// The cross-entropy's reductions over its targets, on the device: the batch's mean loss and the loss
// gradient's scale, both need the count of targets >= 0 (BERT ignores the others), which only the device
// knows without a stall. Built only with FERRY_WITH_CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ferry::kernels::cuda {

// Over targets (n) int32 and, when not null, losses (n) fp32, count = targets >= 0, summed in double in one
// fixed order: *mean = sum of losses / count (0 when count is 0), when mean is not null; *dloss = weight / count
// in fp32 (as the CPU op divides; 0 when count is 0), when dloss is not null. mean and dloss are device
// addresses (pinned mapped host memory included).
cudaError_t target_sums(const float* losses, const int32_t* targets, int64_t n, float weight, float* mean, float* dloss,
                        cudaStream_t stream);

}  // namespace ferry::kernels::cuda
