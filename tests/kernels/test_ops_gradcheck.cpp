// Finite differences for the backward of every CPU op, on random shapes: for L = sum_j <out_j, R_j> with
// random R, each backward (fed dout = R) must give dL/dinput as measured by central differences.
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "kernels/cpu/ops.h"
#include "foundation/rng.h"

namespace ferry::kernels::cpu {
namespace {

std::vector<float> randn(Rng& rng, int64_t n, double std = 1.0) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal() * std);
  return v;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

// Compares analytic[i] with (L(x+h) - L(x-h)) / 2h at a sample of indices of x.
void expect_gradient(const char* what, std::vector<float>& x, const std::vector<float>& analytic,
                     const std::function<double()>& loss, Rng& rng, int samples = 24, float h = 1e-2f) {
  ASSERT_EQ(x.size(), analytic.size());
  for (int s = 0; s < samples; ++s) {
    const size_t i = rng.below(x.size());
    const float x0 = x[i];
    x[i] = x0 + h;
    const double up = loss();
    x[i] = x0 - h;
    const double down = loss();
    x[i] = x0;
    const double numeric = (up - down) / (2.0 * h);
    EXPECT_NEAR(analytic[i], numeric, 2e-3 + 2e-2 * std::abs(numeric)) << what << "[" << i << "]";
  }
}

struct GradCheck : ::testing::TestWithParam<int> {
  Rng rng{static_cast<uint64_t>(1000 + GetParam())};
  int64_t pick(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng.below(hi - lo + 1)); }
};

TEST_P(GradCheck, Embedding) {
  const int64_t B = pick(1, 3), T = pick(1, 7), C = pick(1, 70), V = pick(2, 11);
  std::vector<int32_t> tokens(B * T);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.below(V));
  auto wte = randn(rng, V * C), wpe = randn(rng, T * C), type = randn(rng, C), R = randn(rng, B * T * C);
  for (bool with_type : {false, true}) {  // BERT adds a token-type row
    std::vector<float> out(B * T * C), dwte(V * C), dwpe(T * C), dtype(C);
    auto loss = [&] {
      embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, with_type ? type.data() : nullptr);
      return dot(out, R);
    };
    embedding_backward(dwte.data(), dwpe.data(), R.data(), tokens.data(), B, T, C, with_type ? dtype.data() : nullptr);
    expect_gradient("wte", wte, dwte, loss, rng);
    expect_gradient("wpe", wpe, dwpe, loss, rng);
    if (with_type) expect_gradient("type", type, dtype, loss, rng);
  }
}

TEST_P(GradCheck, LayerNorm) {
  const int64_t N = pick(1, 9), C = pick(2, 80);
  auto x = randn(rng, N * C), w = randn(rng, C), b = randn(rng, C), R = randn(rng, N * C);
  std::vector<float> out(N * C), mean(N), rstd(N), dx(N * C), dw(C), db(C);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    return dot(out, R);
  };
  loss();
  layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  expect_gradient("x", x, dx, loss, rng);
  expect_gradient("w", w, dw, loss, rng);
  expect_gradient("b", b, db, loss, rng);
}

TEST_P(GradCheck, LinearBothWeightLayouts) {
  for (bool out_in : {false, true}) {
    const int64_t N = pick(1, 17), IC = pick(1, 40), OC = pick(1, 40);
    const bool bias = rng.below(2) == 0;
    auto x = randn(rng, N * IC), W = randn(rng, IC * OC), b = randn(rng, OC), R = randn(rng, N * OC);
    std::vector<float> out(N * OC), dx(N * IC), dW(IC * OC), db(OC);
    auto loss = [&] {
      linear_forward(out.data(), x.data(), W.data(), bias ? b.data() : nullptr, N, IC, OC, out_in);
      return dot(out, R);
    };
    linear_backward(dx.data(), dW.data(), bias ? db.data() : nullptr, R.data(), x.data(), W.data(), N, IC, OC, out_in);
    SCOPED_TRACE(out_in ? "weight [out,in]" : "weight [in,out]");
    expect_gradient("x", x, dx, loss, rng);
    expect_gradient("W", W, dW, loss, rng);
    if (bias) expect_gradient("bias", b, db, loss, rng);
  }
}

TEST_P(GradCheck, CausalAttention) {
  const int64_t B = pick(1, 2), T = pick(1, 9), NH = pick(1, 3), C = NH * pick(1, 8);
  auto qkv = randn(rng, B * T * 3 * C), R = randn(rng, B * T * C);
  std::vector<float> out(B * T * C), att(B * NH * T * T), dqkv(B * T * 3 * C);
  auto loss = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return dot(out, R);
  };
  loss();
  attention_backward(dqkv.data(), R.data(), qkv.data(), att.data(), B, T, C, NH);
  expect_gradient("qkv", qkv, dqkv, loss, rng, 48);
}

TEST_P(GradCheck, BidirectionalAttentionWithPadding) {  // BERT's: separate q, k, v and a key mask
  const int64_t B = pick(1, 3), T = pick(1, 9), NH = pick(1, 3), C = NH * pick(1, 8);
  auto q = randn(rng, B * T * C), k = randn(rng, B * T * C), v = randn(rng, B * T * C), R = randn(rng, B * T * C);
  std::vector<int32_t> mask(B * T, 1);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = T - pick(0, T - 1); t < T; ++t) mask[b * T + t] = 0;  // padding at the end, one real token kept
  const AttentionShape shape{B, T, C, NH, C, false, mask.data()};
  std::vector<float> out(B * T * C), att(B * NH * T * T), dq(B * T * C), dk(B * T * C), dv(B * T * C);
  auto loss = [&] {
    attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), shape);
    return dot(out, R);
  };
  loss();
  for (int64_t b = 0; b < B; ++b)  // no attention to padding
    for (int64_t r = 0; r < NH * T; ++r)
      for (int64_t t2 = 0; t2 < T; ++t2)
        if (!mask[b * T + t2]) {
          EXPECT_EQ(att[(b * NH * T + r) * T + t2], 0.0f);
        }
  attention_backward(dq.data(), dk.data(), dv.data(), R.data(), q.data(), k.data(), v.data(), att.data(), shape);
  expect_gradient("q", q, dq, loss, rng, 32);
  expect_gradient("k", k, dk, loss, rng, 32);
  expect_gradient("v", v, dv, loss, rng, 32);
}

TEST_P(GradCheck, Gelu) {
  for (bool exact : {false, true}) {
    const int64_t N = pick(1, 300);
    auto x = randn(rng, N, 2.0), R = randn(rng, N);
    std::vector<float> out(N), dx(N);
    auto loss = [&] {
      gelu_forward(out.data(), x.data(), N, exact);
      return dot(out, R);
    };
    gelu_backward(dx.data(), R.data(), x.data(), N, exact);
    SCOPED_TRACE(exact ? "erf form" : "tanh form");
    expect_gradient("x", x, dx, loss, rng);
  }
}

TEST_P(GradCheck, Residual) {
  const int64_t N = pick(1, 300);
  auto a = randn(rng, N), b = randn(rng, N), R = randn(rng, N);
  std::vector<float> out(N), da(N), db(N);
  auto loss = [&] {
    residual_forward(out.data(), a.data(), b.data(), N);
    return dot(out, R);
  };
  residual_backward(da.data(), db.data(), R.data(), N);
  expect_gradient("a", a, da, loss, rng);
  expect_gradient("b", b, db, loss, rng);
}

TEST_P(GradCheck, CrossEntropy) {
  const int64_t N = pick(1, 9), V = pick(2, 60);
  auto logits = randn(rng, N * V, 3.0);
  std::vector<int32_t> targets(N);
  for (auto& t : targets) t = rng.below(4) == 0 ? -100 : static_cast<int32_t>(rng.below(V));  // -100: not in the loss
  const float dloss = 0.37f;  // d(objective)/d(loss_i), the same for every row
  std::vector<float> losses(N), dlogits(N * V);
  auto loss = [&] {
    cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V);
    double s = 0;
    for (float l : losses) s += dloss * l;
    return s;
  };
  cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), dloss, N, V);
  expect_gradient("logits", logits, dlogits, loss, rng);
}

TEST(OpsAccumulate, BackwardAddsIntoExistingGradients) {
  // Backward ops accumulate: calling one twice doubles the gradient (residual branches and tied weights rely on it).
  Rng rng(5);
  const int64_t N = 4, IC = 6, OC = 5;
  auto x = randn(rng, N * IC), W = randn(rng, IC * OC), R = randn(rng, N * OC);
  std::vector<float> dx1(N * IC), dW1(IC * OC), dx2(N * IC), dW2(IC * OC);
  linear_backward(dx1.data(), dW1.data(), nullptr, R.data(), x.data(), W.data(), N, IC, OC, false);
  linear_backward(dx2.data(), dW2.data(), nullptr, R.data(), x.data(), W.data(), N, IC, OC, false);
  linear_backward(dx2.data(), dW2.data(), nullptr, R.data(), x.data(), W.data(), N, IC, OC, false);
  for (size_t i = 0; i < dW1.size(); ++i) EXPECT_FLOAT_EQ(dW2[i], 2 * dW1[i]);
  for (size_t i = 0; i < dx1.size(); ++i) EXPECT_FLOAT_EQ(dx2[i], 2 * dx1[i]);
}

INSTANTIATE_TEST_SUITE_P(RandomShapes, GradCheck, ::testing::Range(0, 4));

}  // namespace
}  // namespace ferry::kernels::cpu
