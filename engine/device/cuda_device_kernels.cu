// The CUDA device's own kernels: a stream waiting for host work spins on a pinned flag, gradients summed
// over micro-batches (accumulate: fp32 dst = or += src widened from fp32, bf16 or fp16), and the device AdamW's
// step decision from its buckets' statistics.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/step_decision.h"
#include "memory/dtype.h"
#include "kernels/cuda/ops.h"

namespace ferry::device {
namespace {

__global__ void wait_for_flag(volatile int* flag) {
  while (*flag == 0) __nanosleep(1000);
}

// Exact widening to fp32, as the host's accumulate_widened does, so both devices sum the same numbers.
__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float widen(__half x) { return __half2float(x); }

// One grid-stride kernel per source type: any n runs on a bounded grid, each element summed in fp32.
template <typename T>
__global__ void accumulate_kernel(float* __restrict__ dst, const T* __restrict__ src, int64_t n, bool overwrite) {
  const int64_t stride = int64_t(blockDim.x) * gridDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float x = widen(src[i]);
    dst[i] = overwrite ? x : dst[i] + x;
  }
}

template <typename T>
cudaError_t launch_accumulate_as(float* dst, const void* src, int64_t n, bool overwrite, cudaStream_t stream) {
  constexpr int kThreads = 256;
  constexpr int64_t kMaxBlocks = 4096;  // enough to fill a GPU several times over; the stride loop does the rest
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
  accumulate_kernel<T><<<blocks, kThreads, 0, stream>>>(dst, static_cast<const T*>(src), n, overwrite);
  return cudaGetLastError();
}

// One thread: the buckets' statistics summed in bucket order (as cpu_optim::OptimizerStep::decide sums them),
// the decision for the AdamW kernels (gate) and for the host (decision).
__global__ void decide_step_kernel(const kernels::cuda::SquaresResult* stats, int64_t buckets, float max_norm,
                                   float loss_scale, kernels::cuda::AdamWGate* gate, kernels::StepDecision* decision) {
  double sum = 0;
  uint32_t nonfinite = 0;
  for (int64_t b = 0; b < buckets; ++b) sum += stats[b].sum, nonfinite |= stats[b].nonfinite;
  const kernels::StepDecision d = kernels::decide_step(sum, nonfinite == 0, max_norm, loss_scale);
  *gate = {d.grad_scale, d.report.skipped ? 1u : 0u};
  *decision = d;
}

}  // namespace

cudaError_t launch_decide_step(const kernels::cuda::SquaresResult* stats, int64_t buckets, float max_norm,
                               float loss_scale, kernels::cuda::AdamWGate* gate, kernels::StepDecision* decision,
                               cudaStream_t stream) {
  decide_step_kernel<<<1, 1, 0, stream>>>(stats, buckets, max_norm, loss_scale, gate, decision);
  return cudaGetLastError();
}

cudaError_t launch_wait_for_flag(int* device_flag, cudaStream_t stream) {
  wait_for_flag<<<1, 1, 0, stream>>>(device_flag);
  return cudaGetLastError();
}

cudaError_t launch_accumulate(float* dst, const void* src, DType src_type, int64_t n, bool overwrite, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  switch (src_type) {
    case DType::F32: return launch_accumulate_as<float>(dst, src, n, overwrite, stream);
    case DType::BF16: return launch_accumulate_as<__nv_bfloat16>(dst, src, n, overwrite, stream);
    case DType::F16: return launch_accumulate_as<__half>(dst, src, n, overwrite, stream);
    case DType::I32: break;
  }
  return cudaErrorInvalidValue;  // the caller refuses other types first, naming them
}

}  // namespace ferry::device
