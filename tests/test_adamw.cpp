// AdamW against a double-precision reference of PyTorch's formula, the global norm and clipping,
// and the learning-rate schedule.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cpu_optim/adamw.h"
#include "cpu_optim/lr_schedule.h"
#include "models/rng.h"

namespace ferry::cpu_optim {
namespace {

TEST(AdamW, MatchesDoublePrecisionReferenceOverSeveralSteps) {
  models::Rng rng(11);
  const size_t n = 100003;  // several tiles and a ragged end
  std::vector<float> p(n), m(n), v(n), g(n);
  std::vector<double> pd(n), md(n), vd(n);
  for (size_t i = 0; i < n; ++i) pd[i] = p[i] = static_cast<float>(rng.normal());
  const AdamWHyper h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
  const float scale = 0.7f;
  for (int step = 1; step <= 6; ++step) {
    for (auto& x : g) x = static_cast<float>(rng.normal() * 0.1);
    adamw_step(p, g, m, v, h, step, scale);
    const double bc1 = 1 - std::pow(double(h.beta1), step), bc2 = 1 - std::pow(double(h.beta2), step);
    for (size_t i = 0; i < n; ++i) {
      const double gi = double(g[i]) * scale;
      md[i] = h.beta1 * md[i] + (1 - double(h.beta1)) * gi;
      vd[i] = h.beta2 * vd[i] + (1 - double(h.beta2)) * gi * gi;
      pd[i] = pd[i] * (1 - double(h.lr) * h.weight_decay) - double(h.lr) / bc1 * md[i] / (std::sqrt(vd[i] / bc2) + h.eps);
    }
  }
  double worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(p[i] - pd[i]) / std::max(1.0, std::abs(pd[i])));
  EXPECT_LT(worst, 1e-5);
}

TEST(AdamW, ZeroLearningRateChangesNothingAndBadInputThrows) {
  std::vector<float> p{1, -2, 3}, g{0.5f, 0.5f, 0.5f}, m(3), v(3);
  adamw_step(p, g, m, v, {0.0f, 0.9f, 0.95f, 1e-8f, 0.1f}, 1);
  EXPECT_EQ(p, (std::vector<float>{1, -2, 3}));
  std::vector<float> short_m(2);
  EXPECT_THROW(adamw_step(p, g, short_m, v, {}, 1), std::invalid_argument);
  EXPECT_THROW(adamw_step(p, g, m, v, {}, 0), std::invalid_argument);
}

TEST(GradNorm, SumOfSquaresIsExactAndReproducible) {
  std::vector<float> g(70001, 0.5f);
  EXPECT_DOUBLE_EQ(grad_sum_squares(g), 70001 * 0.25);
  models::Rng rng(2);
  for (auto& x : g) x = static_cast<float>(rng.normal());
  EXPECT_EQ(grad_sum_squares(g), grad_sum_squares(g));  // bitwise: fixed reduction order
}

TEST(GradNorm, ClipScaleFollowsTorch) {
  EXPECT_FLOAT_EQ(clip_scale(4.0, 1.0f), static_cast<float>(1.0 / (4.0 + 1e-6)));
  EXPECT_EQ(clip_scale(0.5, 1.0f), 1.0f);
  EXPECT_EQ(clip_scale(100.0, 0.0f), 1.0f);  // clipping off
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
