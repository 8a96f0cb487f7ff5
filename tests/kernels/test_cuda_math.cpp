// The per-element math shared by the CUDA kernels and their host twins (kernels/cuda/*.h), against the CPU
// references: libm and the CPU GELU within fp32 tolerance.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cuda/math.h"
#include "foundation/precision.h"
#include "kernels/cpu/ops.h"

namespace ferry::kernels::cuda {
namespace {

double ulps(float got, double want) {
  const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
  return std::abs(static_cast<double>(got) - want) / ulp;
}

TEST(CudaMath, ExpAndLogWithinTwoUlp) {
  for (float x = -87.0f; x < 88.7f; x += 0.001377f)
    ASSERT_LE(ulps(exp_f(x), std::exp(static_cast<double>(x))), 2.0) << x;
  EXPECT_EQ(exp_f(0.0f), 1.0f);
  EXPECT_EQ(exp_f(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isinf(exp_f(89.0f)));
  EXPECT_GT(exp_f(-100.0f), 0.0f);  // subnormal, not flushed
  EXPECT_NEAR(exp_f(-100.0f), std::exp(-100.0f), 1e-45);
  for (float x = 1e-30f; x < 1e30f; x *= 1.0137f) ASSERT_LE(ulps(log_f(x), std::log(static_cast<double>(x))), 2.0) << x;
  EXPECT_EQ(log_f(1.0f), 0.0f);
  EXPECT_TRUE(std::isinf(log_f(0.0f)) && log_f(0.0f) < 0);
  EXPECT_NEAR(log_f(1e-40f), std::log(1e-40), 1e-5);  // a subnormal argument
}

TEST(CudaMath, TanhAndErfWithinAbsoluteTolerance) {
  for (float x = -12.0f; x < 12.0f; x += 0.000731f) {
    ASSERT_NEAR(tanh_f(x), std::tanh(static_cast<double>(x)), 2.5e-7) << x;
    ASSERT_NEAR(erf_f(x), std::erf(static_cast<double>(x)), 3e-7) << x;
  }
}

// GELU, both forms, forward and backward, against the CPU op (oneDNN).
TEST(CudaMath, GeluMatchesCpuOp) {
  const int64_t n = 20001;
  std::vector<float> x(n), y(n), dx(n), dout(n, 1.0f);
  for (int64_t i = 0; i < n; ++i) x[i] = -10.0f + 20.0f * static_cast<float>(i) / static_cast<float>(n - 1);
  for (bool exact : {false, true}) {
    kernels::cpu::gelu_forward(y.data(), x.data(), n, exact);
    std::fill(dx.begin(), dx.end(), 0.0f);
    kernels::cpu::gelu_backward(dx.data(), dout.data(), x.data(), n, exact);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(gelu_forward_f(x[i], exact), y[i], 1e-6f + 2e-6f * std::abs(y[i])) << x[i] << " exact " << exact;
      ASSERT_NEAR(gelu_backward_f(x[i], exact), dx[i], 2e-6f) << x[i] << " exact " << exact;
    }
  }
}

// RoPE's sine and cosine: the angles of position t < 2^17 times a frequency <= 1, and the quadrant edges.
TEST(CudaMath, SinCosWithinAbsoluteTolerance) {
  std::mt19937 gen(4);
  std::uniform_real_distribution<float> big(-131072.0f, 131072.0f);
  std::vector<float> xs;
  for (float x = -10.0f; x < 10.0f; x += 0.000917f) xs.push_back(x);
  for (int i = 0; i < 200000; ++i) xs.push_back(big(gen));
  for (int k = -8; k <= 8; ++k) xs.push_back(static_cast<float>(k * 1.5707963267948966));
  for (float x : xs) {
    const SinCos sc = sincos_f(x);
    ASSERT_NEAR(sc.sin, std::sin(static_cast<double>(x)), 2.5e-7) << x;
    ASSERT_NEAR(sc.cos, std::cos(static_cast<double>(x)), 2.5e-7) << x;
  }
  EXPECT_EQ(sincos_f(0.0f).sin, 0.0f);
  EXPECT_EQ(sincos_f(0.0f).cos, 1.0f);
}

// SwiGLU: the sigmoid saturates without NaN (e^{-g} overflows to inf for g < -88).
TEST(CudaMath, SwiGluMatchesCpuOp) {
  const int64_t n = 20001;
  std::vector<float> g(n), u(n, 1.5f), out(n), dg(n), du(n), dout(n, 1.0f);
  for (int64_t i = 0; i < n; ++i) g[i] = -120.0f + 240.0f * static_cast<float>(i) / static_cast<float>(n - 1);
  kernels::cpu::swiglu_forward(out.data(), g.data(), u.data(), n);
  kernels::cpu::swiglu_backward(dg.data(), du.data(), dout.data(), g.data(), u.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const SwiGluGrads d = swiglu_backward_f(g[i], u[i], 1.0f);
    ASSERT_NEAR(swiglu_forward_f(g[i], u[i]), out[i], 1e-6f + 1e-6f * std::abs(out[i])) << g[i];
    ASSERT_NEAR(d.dgate, dg[i], 1e-6f + 1e-6f * std::abs(dg[i])) << g[i];
    ASSERT_NEAR(d.dup, du[i], 1e-6f + 1e-6f * std::abs(du[i])) << g[i];
  }
}

// Online softmax: any split of a row into pushed pieces, merged, gives the row's max and sum of e^{x-max};
// the empty state is a neutral element; -inf entries and large logits neither overflow nor give NaN.
TEST(CudaMath, OnlineSoftmaxMergeEqualsWholeRow) {
  std::mt19937 gen(3);
  std::normal_distribution<float> d(0.0f, 8.0f);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + trial * 37 % 1000;
    std::vector<float> x(n);
    for (float& v : x) v = d(gen) + (trial % 5 == 0 ? 1000.0f : 0.0f);
    if (trial % 7 == 0 && n > 1) x[trial % n] = -std::numeric_limits<float>::infinity();
    double mx = -INFINITY, s = 0;
    for (float v : x) mx = std::max(mx, static_cast<double>(v));
    for (float v : x) s += std::exp(v - mx);
    SoftmaxState a = softmax_empty(), b = softmax_empty();
    const int split = trial % (n + 1);
    for (int i = 0; i < split; ++i) a = softmax_push(a, x[i]);
    for (int i = split; i < n; ++i) b = softmax_push(b, x[i]);
    const SoftmaxState m = softmax_merge(a, b);
    ASSERT_EQ(m.max, static_cast<float>(mx));
    ASSERT_NEAR(m.sum, s, 1e-5 * s) << trial;
    const SoftmaxState e = softmax_merge(m, softmax_empty()), f = softmax_merge(softmax_empty(), m);
    ASSERT_EQ(e.max, m.max);
    ASSERT_EQ(e.sum, m.sum);
    ASSERT_EQ(f.sum, m.sum);
  }
}

// LayerNorm moments: Welford pushes and Chan merges of any split give the two-pass mean and variance, even
// with a large common offset (where sum and sum of squares would cancel).
TEST(CudaMath, MomentsMergeEqualsTwoPass) {
  std::mt19937 gen(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + trial * 53 % 2000;
    const float offset = trial % 3 == 0 ? 1e4f : 0.0f;
    std::vector<float> x(n);
    for (float& v : x) v = offset + d(gen);
    double mean = 0, var = 0;
    for (float v : x) mean += v;
    mean /= n;
    for (float v : x) var += (v - mean) * (v - mean);
    var /= n;
    Moments a{0, 0, 0}, b{0, 0, 0};
    const int split = trial % (n + 1);
    for (int i = 0; i < split; ++i) a = moments_push(a, x[i]);
    for (int i = split; i < n; ++i) b = moments_push(b, x[i]);
    const Moments m = moments_merge(a, b);
    float mu, rstd;
    moments_stats(m, 1e-5f, &mu, &rstd);
    ASSERT_EQ(m.n, static_cast<float>(n));
    ASSERT_NEAR(mu, mean, 4e-6 * (std::abs(mean) + 1)) << trial;
    ASSERT_NEAR(rstd, 1 / std::sqrt(var + 1e-5), 2e-3 / std::sqrt(var + 1e-5) * (offset > 0 ? 10 : 1)) << trial;
  }
}

}  // namespace
}  // namespace ferry::kernels::cuda
