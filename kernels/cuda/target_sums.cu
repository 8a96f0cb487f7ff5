// target_sums: one block folds the targets (and losses) in a fixed order; the loss's mean and its gradient's
// scale never leave the device.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/target_sums.h"

namespace ferry::kernels::cuda {
namespace {

// The targets' count and (forward) the losses' sum, in double, in one fixed order.
struct TargetSums {
  double loss;
  uint32_t count, pad;
};
struct TargetSumsMerge {
  __device__ TargetSums operator()(TargetSums a, TargetSums b) const { return {a.loss + b.loss, a.count + b.count, 0u}; }
};

// One block over the n targets (and losses, when given): mean = sum / count (0 without targets, as the CPU
// says), dloss = weight / count in fp32 (the CPU op's division; unread without targets: every row is skipped).
__global__ void __launch_bounds__(kRowBlock) target_sums_kernel(const float* losses, const int32_t* targets, int64_t n,
                                                                 float weight, float* mean, float* dloss) {
  TargetSums s{0.0, 0u, 0u};
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    if (targets[i] >= 0) s = {losses ? s.loss + static_cast<double>(losses[i]) : 0.0, s.count + 1u, 0u};
  s = block_reduce(s, TargetSums{0.0, 0u, 0u}, TargetSumsMerge{});
  if (threadIdx.x != 0) return;
  if (mean) *mean = s.count ? static_cast<float>(s.loss / static_cast<double>(s.count)) : 0.0f;
  if (dloss) *dloss = s.count ? div_f(weight, static_cast<float>(s.count)) : 0.0f;
}

}  // namespace

cudaError_t target_sums(const float* losses, const int32_t* targets, int64_t n, float weight, float* mean, float* dloss,
                        cudaStream_t stream) {
  target_sums_kernel<<<1, kRowBlock, 0, stream>>>(losses, targets, n, weight, mean, dloss);
  return cudaGetLastError();
}

}  // namespace ferry::kernels::cuda
