// CPU AdamW: every ISA path x gradient dtype x upload dtype against a double-precision reference (2 ulp),
// the paths bitwise equal to the scalar path, exact bf16/fp16/fp32 copy-out, stochastic rounding, the fused
// stats pass, odd sizes and unaligned starts, int32 refused, ISA selection and the schedule. The step's
// sequence (statistics, decision, update) is tested in test_optimizer_step.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cpu_optim/adamw.h"
#include "cpu_optim/lr_schedule.h"
#include "formats/safetensors.h"
#include "foundation/precision.h"
#include "foundation/rng.h"
#include "kernels/adamw_math.h"
#include "optim_fixtures.h"

#include <nlohmann/json.hpp>

namespace ferry::cpu_optim {
namespace {

using namespace fixtures;

// fp32 unit in the last place at |x|.
double ulp(double x) {
  const float a = std::abs(static_cast<float>(x));
  return static_cast<double>(std::nextafter(a, INFINITY)) - a;
}

std::string label(Isa isa, DType g, DType u, bool upload) {
  return std::string(to_string(isa)) + " grad " + dtype_name(g) + " upload " + (upload ? dtype_name(u) : "none");
}

TEST(AdamW, EveryPathDtypeAndUploadMatchesDoubleReferenceAndTheScalarPathBitwise) {
  const size_t n = 3 * 16384 + 37;  // several tiles and a ragged end
  for (Isa isa : paths()) {
    for (DType gt : {DType::F32, DType::BF16, DType::F16}) {
      for (int up = 0; up < 4; ++up) {
        const bool upload = up > 0;
        const DType ut = up == 3 ? DType::F32 : up == 2 ? DType::F16 : DType::BF16;
        SCOPED_TRACE(label(isa, gt, ut, upload));
        Rng rng(7);
        State s = make_state(rng, n), scalar = s;
        const CpuAdamW opt = optimizer(isa), ref_opt = optimizer(Isa::Scalar);
        double worst_m = 0, worst_v = 0, worst_p = 0;
        for (int step = 1; step <= 4; ++step) {
          const Grads g = make_grads(rng, n, gt);
          const State before = s;
          const float scale = 0.8f;
          opt.step(s.bucket(g, 0, n, upload, ut), step, kHyper.lr, scale);
          ref_opt.step(scalar.bucket(g, 0, n, upload, ut), step, kHyper.lr, scale);
          ASSERT_EQ(0, std::memcmp(s.p.data(), scalar.p.data(), n * 4)) << "step " << step;
          ASSERT_EQ(0, std::memcmp(s.m.data(), scalar.m.data(), n * 4)) << "step " << step;
          ASSERT_EQ(0, std::memcmp(s.v.data(), scalar.v.data(), n * 4)) << "step " << step;
          if (upload) {
            ASSERT_EQ(s.upload, scalar.upload) << "step " << step;
          }

          // The same step in double from the fp32 state before it, with the coefficients rounded to fp32 as
          // the kernels (and torch's fp32 kernels) use them; errors in ulp of the largest term of each sum.
          const double b1 = float(kHyper.beta1), omb1 = float(1 - kHyper.beta1);
          const double b2 = float(kHyper.beta2), omb2 = float(1 - kHyper.beta2);
          const double step_size = float(kHyper.lr / (1 - std::pow(kHyper.beta1, step)));
          const double inv_bc2_sqrt = float(1 / std::sqrt(1 - std::pow(kHyper.beta2, step)));
          const double decay = float(1 - kHyper.lr * kHyper.weight_decay), eps = float(kHyper.eps);
          int bad = 0;
          for (size_t i = 0; i < n && bad < 5; ++i) {
            // m and v from the fp32 state before the step; p from that and the kernel's new m and v.
            const double gi = double(float(g.f32[i] * scale));
            const double m = b1 * before.m[i] + omb1 * gi;
            const double m_terms = std::max({std::abs(b1 * before.m[i]), std::abs(omb1 * gi), std::abs(m)});
            const double v = b2 * before.v[i] + omb2 * gi * gi;
            const double update = step_size * s.m[i] / (std::sqrt(double(s.v[i])) * inv_bc2_sqrt + eps);
            const double decayed = before.p[i] * decay;
            const double p = decayed - update;
            const double p_terms = std::max({std::abs(decayed), std::abs(update), std::abs(p)});
            worst_m = std::max(worst_m, std::abs(s.m[i] - m) / ulp(m_terms));
            worst_v = std::max(worst_v, std::abs(s.v[i] - v) / ulp(v));
            worst_p = std::max(worst_p, std::abs(s.p[i] - p) / (2 * ulp(p_terms) + ulp(update)));
            // p: 2 ulp of its larger term, plus 1 ulp of the update for the roundings of its denominator (sqrt,
            // then one fma), which show when the update and the decayed weight cancel.
            if (std::abs(s.m[i] - m) > 2 * ulp(m_terms) || std::abs(s.v[i] - v) > 2 * ulp(v) ||
                std::abs(s.p[i] - p) > 2 * ulp(p_terms) + ulp(update)) {
              ADD_FAILURE() << "element " << i << " step " << step << ": p " << s.p[i] << " vs " << p << " ("
                            << std::abs(s.p[i] - p) / ulp(p_terms) << " ulp), m " << s.m[i] << " vs " << m << " ("
                            << std::abs(s.m[i] - m) / ulp(m_terms) << " ulp), v " << s.v[i] << " vs " << v << " ("
                            << std::abs(s.v[i] - v) / ulp(v) << " ulp)";
              ++bad;
            }
            if (upload && s.upload_bits(ut, i) != copy_out_of(s.p[i], ut)) {
              ADD_FAILURE() << "upload " << i << ": " << s.upload_bits(ut, i) << " vs correctly rounded "
                            << copy_out_of(s.p[i], ut);
              ++bad;
            }
          }
        }
        std::printf("%-32s worst error, ulp of the largest term: m %.2f v %.2f; p, share of its bound: %.2f\n",
                    label(isa, gt, ut, upload).c_str(), worst_m, worst_v, worst_p);
      }
    }
  }
}

// Offsets from 64-byte aligned storage: 0 and 16 elements stream on every path (for a 16-bit copy, 8
// streams on AVX2 only), 1 and 3 never do; sizes cover vector bodies, masked and scalar tails.
TEST(AdamW, OddSizesAndUnalignedStartsTouchExactlyTheirElements) {
  for (Isa isa : paths()) {
    for (DType ut : {DType::BF16, DType::F16, DType::F32}) {
      for (size_t n : {0, 1, 7, 15, 16, 17, 31, 33, 100, 1000}) {
        for (size_t offset : {0, 1, 3, 8, 16}) {
          SCOPED_TRACE(label(isa, DType::BF16, ut, true) + " n " + std::to_string(n) + " offset " +
                       std::to_string(offset));
          Rng rng(n * 10 + offset);
          const size_t total = n + offset + 5;
          State s = make_state(rng, total), ref = s;
          const Grads g = make_grads(rng, total, DType::BF16);
          optimizer(isa).step(s.bucket(g, offset, n, true, ut), 3, 1e-3, 1.0f);
          optimizer(Isa::Scalar).step(ref.bucket(g, offset, n, true, ut), 3, 1e-3, 1.0f);
          EXPECT_EQ(s.p, ref.p);
          EXPECT_EQ(s.upload, ref.upload);
          Rng again(n * 10 + offset);
          const State untouched = make_state(again, total);  // the initial state
          for (size_t i = 0; i < total; ++i) {
            if (i >= offset && i < offset + n) {
              EXPECT_EQ(s.upload_bits(ut, i), copy_out_of(s.p[i], ut)) << i;
              continue;
            }
            EXPECT_EQ(s.p[i], untouched.p[i]) << i;
            EXPECT_EQ(s.m[i], untouched.m[i]) << i;
            EXPECT_EQ(s.upload_bits(ut, i), 0u) << i;
          }
          double squares = 0;  // the statistics read exactly these elements too
          for (size_t i = offset; i < offset + n; ++i) squares += double(g.f32[i]) * g.f32[i];
          EXPECT_NEAR(optimizer(isa).grad_stats(g.at(offset), DType::BF16, n).sum_squares, squares, 1e-12 * squares);
        }
      }
    }
  }
}

// Weights that weight decay shrinks with no gradient (m = v = g = 0) into fp32's subnormals (below 2^-126) are
// copied out as the scalar path rounds them, on every path (AVX512-BF16's conversion instruction, which the
// AVX-512 path once used, flushed them to zero).
TEST(AdamW, SubnormalWeightsCopyOutAsTheScalarPathOnEveryPath) {
  const size_t n = 1000;
  for (Isa isa : paths()) {
    for (DType ut : {DType::BF16, DType::F16, DType::F32}) {
      SCOPED_TRACE(label(isa, DType::F32, ut, true));
      Rng rng(5);
      State s = make_state(rng, n);
      Grads g = make_grads(rng, n, DType::F32);
      for (size_t i = 0; i < n; i += 3) {  // subnormal weights, a third of them, both signs, at every lane
        s.p[i] = std::ldexp(float(1 + i % 97), -133) * (i % 2 ? -1.0f : 1.0f);
        s.m[i] = s.v[i] = g.f32[i] = 0.0f;
      }
      State ref = s;
      optimizer(isa).step(s.bucket(g, 0, n, true, ut), 2, 1e-3, 1.0f);
      optimizer(Isa::Scalar).step(ref.bucket(g, 0, n, true, ut), 2, 1e-3, 1.0f);
      ASSERT_EQ(s.p, ref.p);
      ASSERT_TRUE(std::fpclassify(s.p[0]) == FP_SUBNORMAL) << s.p[0];
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(s.upload_bits(ut, i), ref.upload_bits(ut, i)) << "element " << i;
      if (ut != DType::F16) {  // fp16 has no number that small: 0 is its rounding
        ASSERT_NE(s.upload_bits(ut, 0), 0u) << "the subnormal weight became zero in the copy";
      }
    }
  }
}

TEST(AdamW, StochasticRoundingIsUnbiasedDeterministicAndTheSameOnEveryPath) {
  const size_t n = 200000;
  const float x = 1.0f + 0.3f * 0x1p-7f;  // 30% of the way from bf16 1.0 to the next value up
  std::vector<uint16_t> first;
  // Zero gradients, as fp32 or bf16 (each path has a loop of its own for bf16 gradients into a bf16 copy).
  for (Isa isa : paths())
    for (DType grad_type : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::string(to_string(isa)) + " grad " + dtype_name(grad_type));
      std::vector<float> p(n, x), m(n), v(n), g(n, 0.0f);  // 4 bytes of zeros an element: either dtype
      std::vector<uint16_t> up(n);
      // lr 0: the weights stay x, so the upload shows the rounding alone.
      const CpuAdamW opt(AdamWOptions{{0.0, 0.9, 0.95, 1e-8, 0.0}, to_string(isa), 2, Rounding::Stochastic, 5});
      opt.step({p, m, v, g.data(), grad_type, up.data(), DType::BF16}, 1, 0.0, 1.0f);
      size_t ups = 0;
      for (uint16_t h : up) {
        ASSERT_TRUE(h == 0x3f80 || h == 0x3f81) << h;  // one of the two neighbours
        ups += h == 0x3f81;
      }
      EXPECT_NEAR(double(ups) / n, 0.3, 0.01);
      if (first.empty()) first = up;
      EXPECT_EQ(up, first);  // bitwise the same bits on every path
      std::vector<uint16_t> step2(n);
      opt.step({p, m, v, g.data(), grad_type, step2.data(), DType::BF16}, 2, 0.0, 1.0f);
      EXPECT_NE(step2, up);  // a new step draws new bits
    }
  std::vector<float> p(4, 1.0f), m(4), v(4), g(4);
  std::vector<uint16_t> up(4);
  const CpuAdamW f16(AdamWOptions{kHyper, "auto", 1, Rounding::Stochastic, 1});
  EXPECT_THROW(f16.step({p, m, v, g.data(), DType::F32, up.data(), DType::F16}, 1, 1e-3, 1.0f), std::invalid_argument);
}

// The fp32 copy-out, path by path: bitwise the new master in the vector body, the tails and from unaligned
// starts, whatever the gradients' dtype and the rounding mode (which only 16-bit copies round by).
class Fp32CopyOut : public ::testing::TestWithParam<Isa> {};

TEST_P(Fp32CopyOut, IsBitwiseTheNewMasterAtEveryLengthAndStart) {
  const Isa isa = GetParam();
  FERRY_SKIP_UNLESS_SUPPORTED(isa);
  for (Rounding rounding : {Rounding::NearestEven, Rounding::Stochastic}) {
    const CpuAdamW opt(AdamWOptions{kHyper, to_string(isa), 2, rounding, 3});
    for (DType gt : {DType::F32, DType::BF16, DType::F16}) {
      for (size_t n : {1, 7, 8, 9, 15, 16, 17, 40, 16384 + 19}) {
        for (size_t offset : {0, 1, 5, 8, 16}) {
          SCOPED_TRACE(label(isa, gt, DType::F32, true) + " n " + std::to_string(n) + " offset " +
                       std::to_string(offset));
          Rng rng(n + offset);
          const size_t total = n + offset + 3;
          State s = make_state(rng, total);
          const Grads g = make_grads(rng, total, gt);
          opt.step(s.bucket(g, offset, n, true, DType::F32), 2, 1e-3, 0.5f);
          EXPECT_EQ(0, std::memcmp(s.upload_at(DType::F32, offset), s.p.data() + offset, n * 4));
          for (size_t i = 0; i < total; ++i) {
            if (i < offset || i >= offset + n) {
              EXPECT_EQ(s.upload[i], 0u) << i;
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryPath, Fp32CopyOut, ::testing::Values(Isa::Scalar, Isa::Avx2, Isa::Avx512), isa_name);

TEST(AdamW, RefusesInt32GradientsAndUploadsAndChangesNothing) {
  for (Isa isa : paths()) {
    SCOPED_TRACE(to_string(isa));
    Rng rng(5);
    State s = make_state(rng, 40);
    const State before = s;
    const Grads g = make_grads(rng, 40, DType::F32);
    const std::vector<int32_t> ints(40, 1);
    const CpuAdamW opt = optimizer(isa);
    const Bucket int_grads{s.p, s.m, s.v, ints.data(), DType::I32};
    expect_error<std::invalid_argument>([&] { opt.step(int_grads, 1, 1e-3, 1.0f); }, "gradients are int32");
    expect_error<std::invalid_argument>([&] { opt.grad_stats(ints.data(), DType::I32, ints.size()); },
                                        "gradients are int32");
    expect_error<std::invalid_argument>([&] { opt.step(s.bucket(g, 0, 40, true, DType::I32), 1, 1e-3, 1.0f); },
                                        "upload copy's elements are int32");
    EXPECT_EQ(s.p, before.p);
    EXPECT_EQ(s.m, before.m);
    EXPECT_EQ(s.v, before.v);
    EXPECT_EQ(s.upload, before.upload);
  }
}

TEST(GradStats, SumOfSquaresPerPathAndDtype) {
  Rng rng(4);
  for (DType gt : {DType::F32, DType::BF16, DType::F16}) {
    const Grads g = make_grads(rng, 100003, gt, 1.0);
    double want = 0;
    for (float x : g.f32) want += double(x) * x;
    for (Isa isa : paths()) {
      const GradStats s = optimizer(isa).grad_stats(g.data(), gt, g.f32.size());
      EXPECT_NEAR(s.sum_squares, want, 1e-12 * want) << to_string(isa);
      EXPECT_TRUE(s.finite);
    }
  }
}

// The device AdamW's path, the per-step coefficients with the shared element rule (kernels/adamw_math.h), gives
// CpuAdamW's update bitwise (its scalar path, which every ISA path equals), the working copy rounded to bf16 as
// the CPU rounds its upload.
TEST(AdamW, CoefficientsAndTheSharedElementRuleGiveItsUpdateBitwise) {
  const AdamWHyper hyper{3e-4, 0.9, 0.95, 1e-8, 0.1};
  const CpuAdamW cpu({hyper, "scalar", 1});
  const size_t n = 4099;
  Rng rng(7);
  const auto normals = [&rng](size_t count) {
    std::vector<float> v(count);
    for (float& x : v) x = static_cast<float>(rng.normal());
    return v;
  };
  for (const int64_t step : {int64_t{1}, int64_t{2}, int64_t{1000}})
    for (const float grad_scale : {1.0f, 0.37f / 1024.0f}) {
      std::vector<float> p = normals(n), m = normals(n), v = normals(n);
      const std::vector<float> g = normals(n);
      for (float& x : v) x = std::fabs(x);
      std::vector<float> p2 = p, m2 = m, v2 = v;
      std::vector<uint16_t> upload(n), working(n);
      const double lr = 1.5e-4;
      cpu.step({p, m, v, g.data(), DType::F32, upload.data(), DType::BF16}, step, lr, grad_scale);
      const kernels::AdamWCoefficients c = adamw_coefficients(hyper, step, lr, grad_scale, 0);
      for (size_t i = 0; i < n; ++i) {
        kernels::adamw_element(p2[i], m2[i], v2[i], g[i], c);
        working[i] = float_to_bf16(p2[i]);
      }
      ASSERT_EQ(std::memcmp(p.data(), p2.data(), n * 4), 0) << "master, step " << step;
      ASSERT_EQ(std::memcmp(m.data(), m2.data(), n * 4), 0) << "m, step " << step;
      ASSERT_EQ(std::memcmp(v.data(), v2.data(), n * 4), 0) << "v, step " << step;
      ASSERT_EQ(upload, working) << "bf16 working copy, step " << step;
    }
}

TEST(IsaSelection, RequestsEnvironmentAndErrors) {
  unsetenv("FERRY_CPU_ISA");
  EXPECT_EQ(resolve_isa("auto"), best_isa());
  EXPECT_EQ(resolve_isa("scalar"), Isa::Scalar);
  setenv("FERRY_CPU_ISA", "scalar", 1);
  EXPECT_EQ(resolve_isa("auto"), Isa::Scalar);
  setenv("FERRY_CPU_ISA", "sse9", 1);
  try {
    resolve_isa("auto");
    ADD_FAILURE();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("FERRY_CPU_ISA: unknown ISA 'sse9'"), std::string::npos) << e.what();
  }
  unsetenv("FERRY_CPU_ISA");
  EXPECT_THROW(resolve_isa("avx3"), std::runtime_error);
}

TEST(LrSchedule, WarmupThenCosineToTheFloor) {
  LrSchedule s{LrSchedule::Kind::Cosine, 1.0f, 0.1f, 10, 110};
  EXPECT_FLOAT_EQ(s.at(0), 0.1f);
  EXPECT_FLOAT_EQ(s.at(9), 1.0f);
  EXPECT_FLOAT_EQ(s.at(10), 1.0f);
  EXPECT_NEAR(s.at(60), 0.55f, 1e-6);
  EXPECT_FLOAT_EQ(s.at(110), 0.1f);
  EXPECT_FLOAT_EQ(s.at(500), 0.1f);
  for (int i = 11; i < 110; ++i) EXPECT_LE(s.at(i), s.at(i - 1));
  LrSchedule c{LrSchedule::Kind::Constant, 0.5f, 0.0f, 0, 10};
  EXPECT_FLOAT_EQ(c.at(7), 0.5f);
}

}  // namespace
}  // namespace ferry::cpu_optim

namespace ferry::cpu_optim {
namespace {

TEST(AdamW, MatchesTorchOptimAdamW) {
  // tests/data/adamw_reference.safetensors: torch.optim.AdamW (foreach=False) on fixed random tensors.
  const auto ref = formats::SafetensorsFile::open(std::string(FERRY_TEST_DATA) + "/adamw_reference.safetensors");
  const auto h = nlohmann::json::parse(ref.metadata().at("adamw"));
  const AdamWHyper hyper{h["lr"], h["beta1"], h["beta2"], h["eps"], h["weight_decay"]};
  const std::vector<float> p0 = ref.read_f32("param0"), grads = ref.read_f32("grads");
  const std::vector<float> want_p = ref.read_f32("param"), want_m = ref.read_f32("exp_avg"),
                           want_v = ref.read_f32("exp_avg_sq");
  const size_t n = p0.size(), steps = grads.size() / n;
  for (Isa isa : paths()) {
    SCOPED_TRACE(to_string(isa));
    std::vector<float> p = p0, m(n), v(n);
    std::vector<double> m_seen(n);
    const CpuAdamW opt(AdamWOptions{hyper, to_string(isa), 2});
    double worst = 0;
    for (size_t k = 0; k < steps; ++k) {
      opt.step({p, m, v, grads.data() + k * n, DType::F32}, static_cast<int64_t>(k + 1), hyper.lr, 1.0f);
      for (size_t i = 0; i < n; ++i) {
        // torch evaluates m with lerp and without FMA: each step a few ulp of the larger term of each sum apart,
        // and the differences carry into the next step (8 ulp allowed over 5 steps).
        const double m_prev = k ? want_m[(k - 1) * n + i] : 0.0, p_prev = k ? want_p[(k - 1) * n + i] : p0[i];
        const double g = grads[k * n + i];
        // Differences carried from earlier steps scale with the values then: keep the largest seen.
        const double m_scale = m_seen[i] =
            std::max({m_seen[i], std::abs(hyper.beta1 * m_prev), std::abs((1 - hyper.beta1) * g),
                      std::abs(double(want_m[k * n + i]))});
        const double p_scale = std::max(std::abs(p_prev), std::abs(double(want_p[k * n + i])));
        worst = std::max({worst, std::abs(p[i] - want_p[k * n + i]) / ulp(p_scale),
                          std::abs(m[i] - want_m[k * n + i]) / ulp(m_scale),
                          std::abs(v[i] - want_v[k * n + i]) / ulp(want_v[k * n + i])});
        ASSERT_LE(std::abs(p[i] - want_p[k * n + i]), 8 * ulp(p_scale)) << "step " << k + 1 << " element " << i;
        ASSERT_LE(std::abs(m[i] - want_m[k * n + i]), 8 * ulp(m_scale)) << "step " << k + 1 << " element " << i;
        ASSERT_LE(std::abs(v[i] - want_v[k * n + i]), 8 * ulp(want_v[k * n + i]))
            << "step " << k + 1 << " element " << i;
      }
    }
    std::printf("%s: worst difference from torch over %zu steps (p, m, v): %.2f ulp\n", to_string(isa), steps, worst);
  }
}

}  // namespace
}  // namespace ferry::cpu_optim
