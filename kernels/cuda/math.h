// Per-element math shared by the CUDA kernels and their host twins: exp/log/tanh/erf written in fma and
// exact operations (libm and CUDA's libdevice differ in the last bits, so neither can be the common ground),
// GELU (tanh and erf forms) forward and backward, SwiGLU and RoPE's sine and cosine, the online-softmax state
// and the LayerNorm moments; and how a backward op writes a gradient (added, or written over).
#pragma once

#include <cmath>
#include <cstdint>

#include "foundation/precision.h"

namespace ferry::kernels::cuda {

// A backward op's write of activation-gradient element i: added to what is there while `accumulate`, else
// written over it without reading it (the op is the gradient's first producer: what lies there is garbage).
template <class T>
FERRY_HD void store_grad(T* dst, int64_t i, float v, bool accumulate) {
  store(dst, i, accumulate ? load(dst, i) + v : v);
}

// e^x, within 2 ulp over the normal range; subnormal results are produced (no flush), x < -104 gives 0,
// x > 88.73 gives inf. Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, then a degree-7 Taylor polynomial.
FERRY_HD inline float exp_f(float x) {
  if (!(x == x)) return x;
  if (x > 88.7228394f) return bits_float(0x7f800000u);
  if (x < -104.0f) return 0.0f;
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer, ties to even
  const float n = fma_f(x, 1.44269502f, shifter) - shifter;
  float r = fma_f(n, -0.693145752f, x);  // ln2 split in a high part exact in 16 bits and the rest
  r = fma_f(n, -1.42860677e-6f, r);
  float p = 1.98412698e-4f;  // 1/5040
  p = fma_f(p, r, 1.38888889e-3f);
  p = fma_f(p, r, 8.33333333e-3f);
  p = fma_f(p, r, 4.16666667e-2f);
  p = fma_f(p, r, 1.66666667e-1f);
  p = fma_f(p, r, 0.5f);
  p = fma_f(p, r, 1.0f);
  p = fma_f(p, r, 1.0f);
  // 2^n in two factors so that each stays a normal float for n in [-151, 128].
  const auto ni = static_cast<int32_t>(n);
  const int32_t a = ni / 2, b = ni - a;
  const float sa = bits_float(static_cast<uint32_t>(a + 127) << 23);
  const float sb = bits_float(static_cast<uint32_t>(b + 127) << 23);
  return (p * sa) * sb;
}

// ln(x) for finite x > 0 (the softmax sums it is used on are >= 1); 0 gives -inf, negatives NaN.
FERRY_HD inline float log_f(float x) {
  if (x == 0.0f) return -bits_float(0x7f800000u);
  if (!(x > 0.0f)) return bits_float(0x7fc00000u);
  if (!is_finite_f(x)) return x;
  uint32_t u = float_bits(x);
  int32_t e = 0;
  if (u < 0x00800000u) {  // subnormal: scale into the normal range first
    u = float_bits(x * 0x1p23f);
    e = -23;
  }
  e += static_cast<int32_t>(u >> 23) - 127;
  float m = bits_float((u & 0x7fffffu) | 0x3f800000u);  // [1, 2)
  if (m > 1.41421356f) {
    m *= 0.5f;
    e += 1;
  }
  // ln m = 2 atanh(f), f = (m-1)/(m+1), |f| <= 0.172: odd series to f^11.
  const float f = div_f(m - 1.0f, m + 1.0f), f2 = f * f;
  float p = 1.0f / 11.0f;
  p = fma_f(p, f2, 1.0f / 9.0f);
  p = fma_f(p, f2, 1.0f / 7.0f);
  p = fma_f(p, f2, 1.0f / 5.0f);
  p = fma_f(p, f2, 1.0f / 3.0f);
  const float lnm = fma_f(2.0f * f * f2, p, 2.0f * f);
  const auto ef = static_cast<float>(e);
  return fma_f(ef, 0.693145752f, fma_f(ef, 1.42860677e-6f, lnm));
}

// tanh through exp: 1 - 2 / (e^{2|u|} + 1), sign restored; absolute error ~1e-7 (what GELU needs).
FERRY_HD inline float tanh_f(float u) {
  const float a = u < 0.0f ? -u : u;
  const float t = a > 9.0f ? 1.0f : 1.0f - div_f(2.0f, exp_f(2.0f * a) + 1.0f);
  return u < 0.0f ? -t : t;
}

// erf: below 0.5 its Maclaurin series to x^13 (relative error ~1e-8), beyond it Abramowitz & Stegun 7.1.26
// (absolute error below 1.5e-7, 3e-7 in fp32); GELU scales it by 0.5 x, so absolute error is what counts.
FERRY_HD inline float erf_f(float x) {
  const float a = x < 0.0f ? -x : x;
  if (a < 0.5f) {
    const float x2 = x * x;
    float p = 1.0f / 9360.0f;
    p = fma_f(p, x2, -1.0f / 1320.0f);
    p = fma_f(p, x2, 1.0f / 216.0f);
    p = fma_f(p, x2, -1.0f / 42.0f);
    p = fma_f(p, x2, 1.0f / 10.0f);
    p = fma_f(p, x2, -1.0f / 3.0f);
    return 1.12837917f * fma_f(p * x2, x, x);
  }
  const float t = div_f(1.0f, fma_f(0.3275911f, a, 1.0f));
  float p = 1.061405429f;
  p = fma_f(p, t, -1.453152027f);
  p = fma_f(p, t, 1.421413741f);
  p = fma_f(p, t, -0.284496736f);
  p = fma_f(p, t, 0.254829592f);
  const float y = 1.0f - p * t * exp_f(-a * a);
  return x < 0.0f ? -y : y;
}

// ---- GELU: tanh form  y = 0.5 x (1 + tanh(s (x + 0.044715 x^3))), s = sqrt(2/pi)
//            erf form   y = 0.5 x (1 + erf(x / sqrt(2)))
constexpr float kGeluS = 0.7978845608f, kGeluK = 0.044715f, kInvSqrt2 = 0.7071067812f,
                kInvSqrt2Pi = 0.3989422804f;

FERRY_HD inline float gelu_forward_f(float x, bool exact) {
  if (exact) return 0.5f * x * (1.0f + erf_f(x * kInvSqrt2));
  const float th = tanh_f(kGeluS * fma_f(kGeluK * x * x, x, x));
  return 0.5f * x * (1.0f + th);
}

// dy/dx: tanh form 0.5 (1 + th) + 0.5 x (1 - th^2) s (1 + 3k x^2); erf form Phi(x) + x phi(x).
FERRY_HD inline float gelu_backward_f(float x, bool exact) {
  if (exact) return 0.5f * (1.0f + erf_f(x * kInvSqrt2)) + x * kInvSqrt2Pi * exp_f(-0.5f * x * x);
  const float th = tanh_f(kGeluS * fma_f(kGeluK * x * x, x, x));
  const float inner = kGeluS * fma_f(3.0f * kGeluK * x, x, 1.0f);
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * inner;
}

// ---- SwiGLU (Llama's MLP): out = silu(g) * u, silu(g) = g sigmoid(g); the CPU op's expressions.
FERRY_HD inline float sigmoid_f(float g) { return div_f(1.0f, 1.0f + exp_f(-g)); }  // e^{88+} = inf: 0

FERRY_HD inline float swiglu_forward_f(float g, float u) { return g * sigmoid_f(g) * u; }

// d out / d g = u sigmoid(g) (1 + g (1 - sigmoid(g))); d out / d u = silu(g); each times dout.
struct SwiGluGrads {
  float dgate, dup;
};
FERRY_HD inline SwiGluGrads swiglu_backward_f(float g, float u, float dout) {
  const float sig = sigmoid_f(g);
  return {dout * u * sig * (1.0f + g * (1.0f - sig)), dout * g * sig};
}

// ---- sin and cos of an fp32 angle (RoPE's t * inv_freq, up to about 1e6 radians for long contexts): x =
// n pi/2 + r reduced in double (pi/2 in two parts, n * the first exact for |n| < 2^20), then Cephes' sinf
// and cosf polynomials in r, |r| <= pi/4; absolute error ~1e-7.
struct SinCos {
  float sin, cos;
};
FERRY_HD inline SinCos sincos_f(float x) {
  const double xd = x;
  const double n = floor(xd * 0.63661977236758134308 + 0.5);
  const auto r = static_cast<float>((xd - n * 1.57079632673412561417e+00) - n * 6.07710050650619224932e-11);
  const float z = r * r;
  float sp = fma_f(z, -1.9515295891e-4f, 8.3321608736e-3f);
  sp = fma_f(z, sp, -1.6666654611e-1f);
  const float sin_r = fma_f(r * z, sp, r);
  float cp = fma_f(z, 2.443315711809948e-5f, -1.388731625493765e-3f);
  cp = fma_f(z, cp, 4.166664568298827e-2f);
  const float cos_r = fma_f(z * z, cp, fma_f(-0.5f, z, 1.0f));
  switch (static_cast<int64_t>(n) & 3) {  // the quadrant (two's complement: -1 & 3 = 3)
    case 0: return {sin_r, cos_r};
    case 1: return {cos_r, -sin_r};
    case 2: return {-sin_r, -cos_r};
    default: return {-cos_r, sin_r};
  }
}

// ---- Online softmax over a row: the running maximum m and sum of e^{x - m}. The empty state is
// (-inf, 0). Merging two states rescales each sum to the larger maximum; merge is what the kernels'
// shuffle trees combine, and the host twins replay them in the same order.
struct SoftmaxState {
  float max, sum;
};

FERRY_HD inline SoftmaxState softmax_empty() { return {-bits_float(0x7f800000u), 0.0f}; }

FERRY_HD inline SoftmaxState softmax_push(SoftmaxState s, float x) {
  if (x == -bits_float(0x7f800000u)) return s;  // e^{-inf} adds nothing (and -inf - -inf would be NaN)
  if (x > s.max) return {x, fma_f(s.sum, exp_f(s.max - x), 1.0f)};  // e^{-inf} = 0 for the empty state
  return {s.max, s.sum + exp_f(x - s.max)};
}

FERRY_HD inline SoftmaxState softmax_merge(SoftmaxState a, SoftmaxState b) {
  if (b.sum == 0.0f) return a;  // an empty side (also avoids -inf - -inf)
  if (a.sum == 0.0f) return b;
  const float m = max_f(a.max, b.max);
  return {m, fma_f(a.sum, exp_f(a.max - m), b.sum * exp_f(b.max - m))};
}

// ---- LayerNorm row statistics: count, mean and sum of squared deviations (Welford), merged pairwise by
// Chan et al.'s rule: numerically sound in one pass, unlike sum and sum of squares.
struct Moments {
  float n, mean, m2;
};

FERRY_HD inline Moments moments_push(Moments s, float x) {
  const float n = s.n + 1.0f, d = x - s.mean;
  const float mean = s.mean + div_f(d, n);
  return {n, mean, fma_f(d, x - mean, s.m2)};
}

FERRY_HD inline Moments moments_merge(Moments a, Moments b) {
  if (b.n == 0.0f) return a;
  if (a.n == 0.0f) return b;
  const float n = a.n + b.n, d = b.mean - a.mean, wb = div_f(b.n, n);
  return {n, fma_f(d, wb, a.mean), fma_f(d * d, a.n * wb, a.m2 + b.m2)};
}

// mean and 1/sqrt(var + eps) with the population variance, as the CPU op and PyTorch compute them.
FERRY_HD inline void moments_stats(const Moments& s, float eps, float* mean, float* rstd) {
  *mean = s.mean;
  *rstd = div_f(1.0f, sqrt_f(div_f(s.m2, s.n) + eps));
}

}  // namespace ferry::kernels::cuda
