// Rotary position embeddings on the GPU, shared by the kernel and its host twin: the launch's arguments,
// whose frequencies the host computes once with rope_inv_freq (as the CPU op does, so every device rotates
// by the same fp32 angles), and the body of one rotated pair.
#pragma once

#include <cstdint>

#include "foundation/precision.h"
#include "foundation/rope.h"
#include "kernels/cuda/math.h"

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

// Pair e of (B,T,H,hs/2): (x[i], x[i + hs/2]) of its head rotated by sign * t * inv_freq[i] into out,
// written (forward; backward, sign -1: the transpose, when not accumulating) or added (backward). The angle is the CPU
// op's fp32 product.
template <class S>
FERRY_HD void rope_pair(const RopeArgs& a, S* out, const S* x, int64_t e, float sign, bool accumulate) {
  const int64_t h2 = a.hs / 2, i = e % h2, head = (e / h2) % a.H, row = e / (h2 * a.H);
  const SinCos sc = sincos_f(static_cast<float>(row % a.T) * a.inv_freq[i]);
  const int64_t lo = row * a.row_stride + head * a.hs + i, hi = lo + h2;
  const float xl = load(x, lo), xh = load(x, hi), sin = sign * sc.sin;
  const float yl = xl * sc.cos - xh * sin, yh = xh * sc.cos + xl * sin;
  store_grad(out, lo, yl, accumulate);
  store_grad(out, hi, yh, accumulate);
}

}  // namespace ferry::kernels::cuda
