// The device side of reduce.h: the warp butterfly and block combine whose order reduce.h replays on the host.
#pragma once

#include <cstdint>
#include <cstring>

#include <cuda_runtime.h>

#include "memory/dtype.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/row_ops.h"

namespace ferry::kernels::cuda {

// Shuffles a trivially copyable state word by word.
template <class S>
__device__ S shfl_xor_state(S s, int off) {
  static_assert(sizeof(S) % 4 == 0, "states are made of 32-bit words");
  uint32_t w[sizeof(S) / 4];
  memcpy(w, &s, sizeof(S));
  for (auto& x : w) x = __shfl_xor_sync(0xffffffffu, x, off);
  memcpy(&s, w, sizeof(S));
  return s;
}

template <class S>
__device__ S shfl_state(S s, int src) {
  uint32_t w[sizeof(S) / 4];
  memcpy(w, &s, sizeof(S));
  for (auto& x : w) x = __shfl_sync(0xffffffffu, x, src);
  memcpy(&s, w, sizeof(S));
  return s;
}

template <class S, class Merge>
__device__ S warp_tree(S s, Merge merge) {
  for (int off = kWarp / 2; off >= 1; off /= 2) s = merge(s, shfl_xor_state(s, off));
  return s;
}

// Every thread of the block gets lane 0's result of the warp-level butterfly (block_reduce_twin). Ends with
// a barrier, so the shared slots may be reused by the next call.
template <class S, class Merge>
__device__ S block_reduce(S s, S empty, Merge merge) {
  // Aligned as S: the states with a double (SquaresState, TargetSums) are stored with 8-byte shared accesses, which
  // fault on a 4-byte-aligned uint32_t array placed at an odd multiple of 4.
  __shared__ S warp_values[kWarp];
  const int lane = static_cast<int>(threadIdx.x) % kWarp, warp = static_cast<int>(threadIdx.x) / kWarp;
  const int warps = static_cast<int>(blockDim.x) / kWarp;
  s = warp_tree(s, merge);
  if (lane == 0) warp_values[warp] = s;
  __syncthreads();
  S v = lane < warps ? warp_values[lane] : empty;
  v = shfl_state(warp_tree(v, merge), 0);
  __syncthreads();
  return v;
}

// The merges as functors (inlined into the shuffle loops).
struct MomentsMerge {
  __device__ Moments operator()(Moments a, Moments b) const { return moments_merge(a, b); }
};
struct SoftmaxMerge {
  __device__ SoftmaxState operator()(SoftmaxState a, SoftmaxState b) const { return softmax_merge(a, b); }
};
struct SumMerge {
  __device__ float operator()(float a, float b) const { return sum_merge(a, b); }
};
struct SumPairMerge {
  __device__ SumPair operator()(SumPair a, SumPair b) const { return sum_pair_merge(a, b); }
};
struct SquaresMerge {
  __device__ SquaresState operator()(SquaresState a, SquaresState b) const { return squares_merge(a, b); }
};

// Calls f(T{}) with the storage type of `type`; false for a type the kernels do not store (int32).
template <class F>
bool with_storage(DType type, F&& f) {
  switch (type) {
    case DType::F32: f(float{}); return true;
    case DType::BF16: f(Bf16{}); return true;
    case DType::F16: f(Fp16{}); return true;
    case DType::I32: break;
  }
  return false;
}

inline cudaError_t launched(bool ok) { return ok ? cudaGetLastError() : cudaErrorInvalidValue; }

}  // namespace ferry::kernels::cuda
