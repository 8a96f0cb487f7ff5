// The compact optimizer state's AdamW (CompactBucket: bf16 weights, m and v): every ISA path bitwise the
// scalar path at every size, start and split; one step within stated bounds of a double-precision reference;
// updates far below a bf16 ulp moving the weights in expectation (stochastic rounding); skipped steps and
// refused buckets changing nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu_optim/adamw.h"
#include "cpu_optim/optimizer_step.h"
#include "foundation/precision.h"
#include "foundation/rng.h"
#include "optim_fixtures.h"

namespace ferry::cpu_optim {
namespace {

using namespace fixtures;

// Weights, m and v as bf16 bits.
struct CompactState {
  std::vector<uint16_t> p, m, v;
  CompactBucket bucket(const Grads& g, size_t offset, size_t n, uint32_t first_index = 0) {
    return {{p.data() + offset, n}, {m.data() + offset, n}, {v.data() + offset, n}, g.at(offset), g.type, first_index};
  }
};

CompactState make_compact_state(Rng& rng, size_t n) {
  CompactState s{std::vector<uint16_t>(n), std::vector<uint16_t>(n), std::vector<uint16_t>(n)};
  for (size_t i = 0; i < n; ++i) {
    s.p[i] = float_to_bf16(static_cast<float>(rng.normal()));
    s.m[i] = float_to_bf16(static_cast<float>(rng.normal() * 0.01));
    s.v[i] = float_to_bf16(static_cast<float>(std::abs(rng.normal()) * 1e-3));
  }
  return s;
}

double widened(uint16_t h) { return bf16_to_float(h); }

TEST(CompactAdamW, EveryPathIsBitwiseTheScalarPathAtEverySizeAndStart) {
  for (Isa isa : paths()) {
    for (DType gt : {DType::F32, DType::BF16, DType::F16}) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{15}, size_t{16}, size_t{17}, size_t{33}, size_t{1000},
                       size_t{3 * 16384 + 37}}) {
        for (size_t offset : {0, 1, 3}) {
          SCOPED_TRACE(std::string(to_string(isa)) + " grad " + dtype_name(gt) + " n " + std::to_string(n) +
                       " offset " + std::to_string(offset));
          Rng rng(n * 10 + offset);
          const size_t total = n + offset + 5;
          CompactState s = make_compact_state(rng, total), ref = s;
          const CompactState before = s;
          const Grads g = make_grads(rng, total, gt);
          for (int step = 1; step <= 3; ++step) {
            optimizer(isa).step(s.bucket(g, offset, n, 12345), step, 1e-3, 0.8f);
            optimizer(Isa::Scalar).step(ref.bucket(g, offset, n, 12345), step, 1e-3, 0.8f);
          }
          ASSERT_EQ(s.p, ref.p);
          ASSERT_EQ(s.m, ref.m);
          ASSERT_EQ(s.v, ref.v);
          for (size_t i = 0; i < total; ++i) {
            if (i >= offset && i < offset + n) continue;
            ASSERT_EQ(s.p[i], before.p[i]) << i;  // outside the bucket: untouched
            ASSERT_EQ(s.m[i], before.m[i]) << i;
            ASSERT_EQ(s.v[i], before.v[i]) << i;
          }
        }
      }
    }
  }
}

// Two buckets whose first_index continue each other update bitwise as the one bucket they split: an element's
// random bits are its own in the model, whatever the bucketing.
TEST(CompactAdamW, ASplitBucketUpdatesAsTheWholeOne) {
  const size_t n = 50000, cut = 17001;
  for (Isa isa : paths()) {
    SCOPED_TRACE(to_string(isa));
    Rng rng(3);
    CompactState whole = make_compact_state(rng, n), split = whole;
    const Grads g = make_grads(rng, n, DType::BF16);
    optimizer(isa).step(whole.bucket(g, 0, n, 1000), 2, 1e-3, 1.0f);
    optimizer(isa).step(split.bucket(g, 0, cut, 1000), 2, 1e-3, 1.0f);
    optimizer(isa).step(split.bucket(g, cut, n - cut, 1000 + cut), 2, 1e-3, 1.0f);
    EXPECT_EQ(whole.p, split.p);
    EXPECT_EQ(whole.m, split.m);
    EXPECT_EQ(whole.v, split.v);
  }
}

// One step against the same step in double from the same bf16 state, with the coefficients rounded to fp32
// as the kernels use them. m and v are rounded to nearest: within half a bf16 ulp (2^-8 of the value) of the
// exact value. The weight is rounded stochastically to one of the two bf16 neighbours of its new value: within
// one ulp (2^-7). Each bound has a few fp32 ulp of the sum's largest term added for the fp32 arithmetic.
TEST(CompactAdamW, OneStepIsWithinItsBoundsOfADoubleReference) {
  const size_t n = 3 * 16384 + 37;
  for (Isa isa : paths()) {
    SCOPED_TRACE(to_string(isa));
    Rng rng(11);
    CompactState s = make_compact_state(rng, n);
    const CompactState before = s;
    const Grads g = make_grads(rng, n, DType::F32);
    const int step = 3;
    const float scale = 0.8f;
    optimizer(isa).step(s.bucket(g, 0, n), step, kHyper.lr, scale);
    const double b1 = float(kHyper.beta1), omb1 = float(1 - kHyper.beta1);
    const double b2 = float(kHyper.beta2), omb2 = float(1 - kHyper.beta2);
    const double step_size = float(kHyper.lr / (1 - std::pow(kHyper.beta1, step)));
    const double inv_bc2_sqrt = float(1 / std::sqrt(1 - std::pow(kHyper.beta2, step)));
    const double decay = float(1 - kHyper.lr * kHyper.weight_decay), eps = float(kHyper.eps);
    constexpr double kFp32 = 0x1p-21;  // 4 fp32 ulp, relative
    int bad = 0;
    for (size_t i = 0; i < n && bad < 5; ++i) {
      const double gi = double(float(g.f32[i] * scale));
      const double m0 = widened(before.m[i]), v0 = widened(before.v[i]), p0 = widened(before.p[i]);
      const double m = b1 * m0 + omb1 * gi, v = b2 * v0 + omb2 * gi * gi;
      const double update = step_size * m / (std::sqrt(v) * inv_bc2_sqrt + eps);
      const double p = p0 * decay - update;
      const double m_terms = std::max({std::abs(b1 * m0), std::abs(omb1 * gi), std::abs(m)});
      const double p_terms = std::max({std::abs(p0), std::abs(update), std::abs(p)});
      const double m_err = std::abs(widened(s.m[i]) - m), v_err = std::abs(widened(s.v[i]) - v),
                   p_err = std::abs(widened(s.p[i]) - p);
      const bool ok = m_err <= 0x1p-8 * std::abs(m) + kFp32 * m_terms && v_err <= 0x1p-8 * v + kFp32 * v &&
                      p_err <= 0x1p-7 * std::abs(p) + 8 * kFp32 * p_terms;
      if (!ok) {
        ++bad;
        ADD_FAILURE() << "element " << i << ": m " << widened(s.m[i]) << " vs " << m << ", v " << widened(s.v[i])
                      << " vs " << v << ", p " << widened(s.p[i]) << " vs " << p;
      }
    }
  }
}

// Every weight 1.0, every gradient the same: the first step moves each by lr exactly (m/sqrt(v) is 1 after
// bias correction), here 0.3 of the bf16 ulp above 1.0. Rounding to nearest would keep every weight at 1.0;
// stochastic rounding moves 30% of them one ulp up, so the mean moves by lr, and the same on every path.
TEST(CompactAdamW, UpdatesFarBelowAnUlpMoveTheWeightsInExpectation) {
  const size_t n = 200000;
  const double lr = 0.3 * 0x1p-7;
  std::vector<uint16_t> first;
  for (Isa isa : paths()) {
    SCOPED_TRACE(to_string(isa));
    std::vector<uint16_t> p(n, float_to_bf16(1.0f)), m(n, 0), v(n, 0);
    const std::vector<float> g(n, -0.5f);
    const CpuAdamW opt(AdamWOptions{{lr, 0.9, 0.95, 1e-12, 0.0}, to_string(isa), 2, Rounding::NearestEven, 5});
    opt.step(CompactBucket{p, m, v, g.data(), DType::F32}, 1, lr, 1.0f);
    double sum = 0;
    for (uint16_t h : p) {
      ASSERT_TRUE(h == 0x3f80 || h == 0x3f81) << h;  // 1.0 or the next bf16 value up
      sum += widened(h) - 1.0;
    }
    EXPECT_NEAR(sum / n, lr, 0.02 * lr);
    if (first.empty()) first = p;
    EXPECT_EQ(p, first);
  }
}

TEST(CompactAdamW, ASkippedStepAndARefusedBucketChangeNothing) {
  const size_t n = 1000;
  Rng rng(5);
  CompactState s = make_compact_state(rng, n);
  const CompactState before = s;
  Grads g = make_grads(rng, n, DType::F32);
  g.f32[10] = NAN;
  const CpuAdamW opt = optimizer(Isa::Scalar);
  OptimizerStep step(opt, 1, 1.0f);
  step.record_stats(0, g.data(), g.type, n);
  EXPECT_TRUE(step.decide().report.skipped);
  step.update(0, s.bucket(g, 0, n), 1, 1e-3);
  EXPECT_EQ(s.p, before.p);
  EXPECT_EQ(s.m, before.m);

  CompactBucket short_m = s.bucket(g, 0, n);
  short_m.m = short_m.m.subspan(1);
  expect_error<std::invalid_argument>([&] { opt.step(short_m, 1, 1e-3, 1.0f); }, "same length");
  CompactBucket ints = s.bucket(g, 0, n);
  ints.grad_type = DType::I32;
  expect_error<std::invalid_argument>([&] { opt.step(ints, 1, 1e-3, 1.0f); }, "fp32, bf16 or fp16");
  EXPECT_EQ(s.p, before.p);
}

}  // namespace
}  // namespace ferry::cpu_optim
