// Rotary position embeddings on the GPU, shared by the kernel and its host twin: the launch's arguments,
// whose frequencies the host computes once with rope_inv_freq (as the CPU op does, so every device rotates
// by the same fp32 angles), the launch map, and the body of W consecutive rotated pairs of one head (pack.h).
#pragma once

#include <cstdint>

#include "foundation/precision.h"
#include "foundation/rope.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/math.h"
#include "kernels/cuda/pack.h"

namespace ferry::kernels::cuda {

constexpr int64_t kMaxRopePairs = 256;  // head sizes up to 512 (Llama's are 64 to 128)

// x, out (B,T,H,hs), the rows of one token row_stride elements apart; passed by value to the kernel
// (1 KiB of parameters: no frequency table in device memory).
struct RopeArgs {
  int64_t B, T, H, hs, row_stride;
  float inv_freq[kMaxRopePairs];
};

// False for a head size the kernel does not take (odd, or past 2 * kMaxRopePairs).
inline bool rope_args(RopeArgs* a, int64_t B, int64_t T, int64_t H, int64_t hs, int64_t row_stride,
                      const RopeScaling& scaling) {
  if (hs <= 0 || hs % 2 != 0 || hs / 2 > kMaxRopePairs) return false;
  *a = {B, T, H, hs, row_stride, {}};
  for (int64_t i = 0; i < hs / 2; ++i) a->inv_freq[i] = rope_inv_freq(i, hs, scaling);
  return true;
}

FERRY_HD inline int64_t rope_pairs(const RopeArgs& a) { return a.B * a.T * a.H * (a.hs / 2); }

// The map over the pairs: packs of W pairs (16-byte loads of the W low and the W high elements) when a head's
// hs/2 pairs and the row stride are multiples of W and out and x are aligned, so a pack lies in one head and
// starts aligned; else single pairs.
template <class T>
ElementwiseMap rope_map(const RopeArgs& a, const T* out, const T* x) {
  if ((a.hs / 2) % kPackWidth<T> != 0 || a.row_stride % kPackWidth<T> != 0) return elementwise_map(rope_pairs(a));
  return elementwise_map_for<T>(rope_pairs(a), out, x);
}

// Pairs e .. e + W - 1 of (B,T,H,hs/2), one head's: (x[i], x[i + hs/2]) of the head rotated by sign * t * inv_freq[i]
// into out, written (forward; backward, sign -1: the transpose, when not accumulating) or added (backward). The
// angle is the CPU op's fp32 product. I is the kernel's index type (the divisions are done in it).
template <int W, class S, class I>
FERRY_HD void rope_pack(const RopeArgs& a, S* out, const S* x, I e, float sign, bool accumulate) {
  const I h2 = static_cast<I>(a.hs / 2), i = e % h2, head = (e / h2) % static_cast<I>(a.H),
          row = e / (h2 * static_cast<I>(a.H));
  const int64_t lo = row * a.row_stride + head * a.hs + i, hi = lo + h2;
  const auto t = static_cast<float>(row % static_cast<I>(a.T));
  float xl[W], xh[W];
  load_pack<W>(x, lo, xl);
  load_pack<W>(x, hi, xh);
  for (int j = 0; j < W; ++j) {
    const SinCos sc = sincos_f(t * a.inv_freq[i + j]);
    const float sin = sign * sc.sin;
    const float yl = xl[j] * sc.cos - xh[j] * sin, yh = xh[j] * sc.cos + xl[j] * sin;
    xl[j] = yl, xh[j] = yh;
  }
  store_grad_pack<W>(out, lo, xl, accumulate);
  store_grad_pack<W>(out, hi, xh, accumulate);
}

}  // namespace ferry::kernels::cuda
