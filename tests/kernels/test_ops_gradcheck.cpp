// Finite differences for the backward of every CPU op, on random shapes: for L = sum_j <out_j, R_j> with
// random R, each backward (fed dout = R) must give dL/dinput as measured by central differences. The Llama
// ops' backward runs into gradients already holding values (they must add to them), and their forward is
// checked against the plain formula (grouped-query attention against ordinary attention on repeated k, v).
#include <gtest/gtest.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include <cmath>
#include <cstring>
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

// What a backward added to a gradient that held `before`.
std::vector<float> added(const std::vector<float>& after, const std::vector<float>& before) {
  std::vector<float> d(after.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = after[i] - before[i];
  return d;
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
  // The gradient check alone passes a window one key too wide (forward and backward agree on it): query t
  // must weigh keys 0..t only, and those weights sum to one.
  for (int64_t r = 0; r < B * NH * T; ++r) {
    const int64_t t = r % T;
    double sum = 0;
    for (int64_t t2 = 0; t2 < T; ++t2) {
      if (t2 > t) {
        EXPECT_EQ(att[r * T + t2], 0.0f) << "query " << t << " weighs the later key " << t2;
      }
      sum += att[r * T + t2];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5) << "query " << t;
  }
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
    cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, V);
    double s = 0;
    for (float l : losses) s += dloss * l;
    return s;
  };
  cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), dloss, N, V, V);
  expect_gradient("logits", logits, dlogits, loss, rng);
}

// The loss itself, which the gradient check only samples: -log softmax over the first V of each padded row at
// the target (token 0 and the last token included), 0 for an ignored row; the padding's huge logits stay out.
TEST(CrossEntropyForward, IsMinusLogSoftmaxOfTheRealVocabularyAtTheTarget) {
  Rng rng(16);
  const int64_t N = 6, V = 11, stride = 16;
  auto logits = randn(rng, N * stride, 3.0);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = V; c < stride; ++c) logits[r * stride + c] = 50.0f;
  const std::vector<int32_t> targets{0, -100, 10, 3, 0, 7};
  std::vector<float> losses(N, -1.0f);
  cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, stride);
  for (int64_t r = 0; r < N; ++r) {
    if (targets[r] < 0) {
      EXPECT_EQ(losses[r], 0.0f) << "ignored row " << r;
      continue;
    }
    double sum = 0;
    for (int64_t c = 0; c < V; ++c) sum += std::exp(double(logits[r * stride + c]));
    const double expected = std::log(sum) - logits[r * stride + targets[r]];
    EXPECT_NEAR(losses[r], expected, 1e-5 * (1 + expected)) << "row " << r << ", target " << targets[r];
  }
}

TEST_P(GradCheck, RmsNormAddsIntoGradients) {
  const int64_t N = pick(1, 9), C = pick(1, 80);
  auto x = randn(rng, N * C), w = randn(rng, C), R = randn(rng, N * C);
  const auto dx0 = randn(rng, N * C), dw0 = randn(rng, C);
  auto dx = dx0, dw = dw0;
  std::vector<float> out(N * C), rstd(N);
  auto loss = [&] {
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    return dot(out, R);
  };
  loss();
  rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N, C);
  expect_gradient("x", x, added(dx, dx0), loss, rng);
  expect_gradient("w", w, added(dw, dw0), loss, rng);
}

// Llama 3's scaling on half the runs; q or k inside a packed row on some (row_stride past the heads).
RopeShape random_rope(GradCheck& g) {
  const int64_t H = g.pick(1, 3), hs = 2 * g.pick(1, 8);
  RopeShape s{g.pick(1, 2), g.pick(1, 9), H, hs, H * hs + g.pick(0, 1) * g.pick(1, 5), {}};
  s.scaling.theta = 100.0f;  // frequencies far apart within a short head
  if (g.rng.below(2)) s.scaling = {500000.0f, 8.0f, 1.0f, 4.0f, 8.0f};
  return s;
}

TEST_P(GradCheck, RopeAddsIntoGradients) {
  const RopeShape s = random_rope(*this);
  const int64_t n = s.B * s.T * s.row_stride;
  auto x = randn(rng, n), R = randn(rng, n);
  const auto dx0 = randn(rng, n);
  auto dx = dx0;
  std::vector<float> out(n);
  auto loss = [&] {
    rope_forward(out.data(), x.data(), s);
    return dot(out, R);
  };
  rope_backward(dx.data(), R.data(), s);
  expect_gradient("x", x, added(dx, dx0), loss, rng, 32);
}

TEST_P(GradCheck, SwiGluAddsIntoGradients) {
  const int64_t N = pick(1, 300);
  auto gate = randn(rng, N, 3.0), up = randn(rng, N), R = randn(rng, N);
  const auto dgate0 = randn(rng, N), dup0 = randn(rng, N);
  auto dgate = dgate0, dup = dup0;
  std::vector<float> out(N);
  auto loss = [&] {
    swiglu_forward(out.data(), gate.data(), up.data(), N);
    return dot(out, R);
  };
  swiglu_backward(dgate.data(), dup.data(), R.data(), gate.data(), up.data(), N);
  expect_gradient("gate", gate, added(dgate, dgate0), loss, rng);
  expect_gradient("up", up, added(dup, dup0), loss, rng);
}

// Llama's attention: KV < NH key/value heads, causal; q, k, v in three tensors (k and v narrower than q).
TEST_P(GradCheck, GroupedQueryAttentionAddsIntoGradients) {
  const int64_t KV = pick(1, 2), NH = KV * pick(2, 3), hs = pick(1, 6), C = NH * hs, B = pick(1, 2), T = pick(1, 8);
  auto q = randn(rng, B * T * C), k = randn(rng, B * T * KV * hs), v = randn(rng, B * T * KV * hs);
  auto R = randn(rng, B * T * C);
  const auto dq0 = randn(rng, q.size()), dk0 = randn(rng, k.size()), dv0 = randn(rng, v.size());
  auto dq = dq0, dk = dk0, dv = dv0;
  AttentionShape shape{B, T, C, NH, C, true, nullptr, KV, KV * hs};
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  auto loss = [&] {
    attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), shape);
    return dot(out, R);
  };
  loss();
  attention_backward(dq.data(), dk.data(), dv.data(), R.data(), q.data(), k.data(), v.data(), att.data(), shape);
  expect_gradient("q", q, added(dq, dq0), loss, rng, 32);
  expect_gradient("k", k, added(dk, dk0), loss, rng, 32);
  expect_gradient("v", v, added(dv, dv0), loss, rng, 32);
}

// The same on one packed (B,T,(NH+2KV)*hs) [q | k | v] tensor (a fused q/k/v projection).
TEST_P(GradCheck, GroupedQueryAttentionOnPackedQkv) {
  const int64_t KV = pick(1, 2), NH = KV * pick(2, 3), hs = pick(1, 6), C = NH * hs, B = pick(1, 2), T = pick(1, 8);
  const int64_t rs = C + 2 * KV * hs;
  auto qkv = randn(rng, B * T * rs), R = randn(rng, B * T * C);
  std::vector<float> out(B * T * C), att(B * NH * T * T), dqkv(qkv.size());
  const AttentionShape shape{B, T, C, NH, rs, true, nullptr, KV, rs};
  const float* k = qkv.data() + C;
  auto loss = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), qkv.data() + C, qkv.data() + C + KV * hs, shape);
    return dot(out, R);
  };
  loss();
  attention_backward(dqkv.data(), dqkv.data() + C, dqkv.data() + C + KV * hs, R.data(), qkv.data(), k, k + KV * hs,
                     att.data(), shape);
  expect_gradient("qkv", qkv, dqkv, loss, rng, 48);
}

// Backward ops accumulate: calling one twice doubles the gradient (residual branches and tied weights rely on
// it). Both weight layouts: the [out,in] one is the tied LM head's, whose dW adds to the embedding's.
TEST(OpsAccumulate, BackwardAddsIntoExistingGradients) {
  Rng rng(5);
  const int64_t N = 4, IC = 6, OC = 5;
  auto x = randn(rng, N * IC), W = randn(rng, IC * OC), R = randn(rng, N * OC);
  for (bool out_in : {false, true}) {
    SCOPED_TRACE(out_in ? "weight [out,in]" : "weight [in,out]");
    std::vector<float> dx1(N * IC), dW1(IC * OC), db1(OC), dx2(N * IC), dW2(IC * OC), db2(OC);
    linear_backward(dx1.data(), dW1.data(), db1.data(), R.data(), x.data(), W.data(), N, IC, OC, out_in);
    for (int twice = 0; twice < 2; ++twice)
      linear_backward(dx2.data(), dW2.data(), db2.data(), R.data(), x.data(), W.data(), N, IC, OC, out_in);
    for (size_t i = 0; i < dW1.size(); ++i) EXPECT_FLOAT_EQ(dW2[i], 2 * dW1[i]);
    for (size_t i = 0; i < dx1.size(); ++i) EXPECT_FLOAT_EQ(dx2[i], 2 * dx1[i]);
    for (size_t i = 0; i < db1.size(); ++i) EXPECT_FLOAT_EQ(db2[i], 2 * db1[i]);
  }
}

// ---- The Llama ops' forward against the plain formulas, in double.

TEST(LlamaForward, RmsNormIsTheFormula) {
  Rng rng(11);
  const int64_t N = 5, C = 37;
  const float eps = 1e-6f;
  auto x = randn(rng, N * C), w = randn(rng, C);
  std::vector<float> out(N * C), rstd(N);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  for (int64_t r = 0; r < N; ++r) {
    double ms = 0;
    for (int64_t c = 0; c < C; ++c) ms += double(x[r * C + c]) * x[r * C + c];
    const double s = 1.0 / std::sqrt(ms / C + eps);
    EXPECT_NEAR(rstd[r], s, 1e-5 * s) << "row " << r;
    for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(out[r * C + c], x[r * C + c] * s * w[c], 1e-5) << r << "," << c;
  }
}

TEST(LlamaForward, SwiGluIsTheFormula) {
  const std::vector<float> gate = {-100.0f, -3.5f, -0.25f, 0.0f, 0.7f, 4.0f, 100.0f};
  const std::vector<float> up = {2.0f, -1.5f, 3.0f, 5.0f, 0.5f, -2.0f, 0.25f};
  std::vector<float> out(gate.size());
  swiglu_forward(out.data(), gate.data(), up.data(), static_cast<int64_t>(gate.size()));
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = gate[i], expected = g / (1.0 + std::exp(-g)) * up[i];
    EXPECT_NEAR(out[i], expected, 1e-6 + 1e-6 * std::abs(expected)) << "gate " << g;
  }
}

// A packed row's elements past the heads (sentinel 7) are left alone; position 0 is the identity.
TEST(LlamaForward, RopeAtPositionZeroIsTheIdentityAndRotationsKeepNorms) {
  Rng rng(12);
  const RopeShape s{2, 6, 3, 8, 3 * 8 + 5, {}};
  const int64_t n = s.B * s.T * s.row_stride, h2 = s.hs / 2;
  auto x = randn(rng, n);
  std::vector<float> out(n, 7.0f);
  rope_forward(out.data(), x.data(), s);
  for (int64_t r = 0; r < s.B * s.T; ++r) {
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < h2; ++i) {
        const int64_t lo = r * s.row_stride + h * s.hs + i, hi = lo + h2;
        if (r % s.T == 0) {
          EXPECT_EQ(out[lo], x[lo]);
          EXPECT_EQ(out[hi], x[hi]);
        }
        const double before = std::hypot(double(x[lo]), double(x[hi]));
        EXPECT_NEAR(std::hypot(double(out[lo]), double(out[hi])), before, 1e-5 * (1 + before)) << "row " << r;
      }
    for (int64_t c = s.H * s.hs; c < s.row_stride; ++c) EXPECT_EQ(out[r * s.row_stride + c], 7.0f);
  }
}

// Llama 3's scaling slows the long wavelengths: the rotation must use rope_inv_freq's scaled frequencies
// (this shape has pairs kept, blended and slowed).
TEST(LlamaForward, RopeRotatesByThePositionTimesTheScaledFrequency) {
  Rng rng(13);
  const RopeShape s{1, 9, 2, 16, 32, {500000.0f, 8.0f, 1.0f, 4.0f, 8.0f}};
  const int64_t n = s.B * s.T * s.row_stride, h2 = s.hs / 2;
  auto x = randn(rng, n);
  std::vector<float> out(n);
  rope_forward(out.data(), x.data(), s);
  for (int64_t t = 0; t < s.T; ++t)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < h2; ++i) {
        const double angle = double(t) * rope_inv_freq(i, s.hs, s.scaling);
        const int64_t lo = t * s.row_stride + h * s.hs + i, hi = lo + h2;
        EXPECT_NEAR(out[lo], x[lo] * std::cos(angle) - x[hi] * std::sin(angle), 1e-5) << "t " << t << " pair " << i;
        EXPECT_NEAR(out[hi], x[hi] * std::cos(angle) + x[lo] * std::sin(angle), 1e-5) << "t " << t << " pair " << i;
      }
}

// k, v (B,T,KV*hs) with each head repeated G times in a row, as Hugging Face's repeat_kv does: (B,T,NH*hs).
std::vector<float> repeat_kv(const std::vector<float>& kv, int64_t rows, int64_t KV, int64_t G, int64_t hs) {
  std::vector<float> out(rows * KV * G * hs);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < KV * G; ++h)
      for (int64_t i = 0; i < hs; ++i) out[(r * KV * G + h) * hs + i] = kv[(r * KV + h / G) * hs + i];
  return out;
}

// The sum over each group of G heads of a (rows, KV*G*hs) gradient: what reaches the shared head.
std::vector<float> sum_groups(const std::vector<float>& d, int64_t rows, int64_t KV, int64_t G, int64_t hs) {
  std::vector<float> out(rows * KV * hs);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < KV * G; ++h)
      for (int64_t i = 0; i < hs; ++i) out[(r * KV + h / G) * hs + i] += d[(r * KV * G + h) * hs + i];
  return out;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& expected, const char* what) {
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], expected[i], 1e-5 + 1e-5 * std::abs(expected[i])) << what << "[" << i << "]";
}

// Both directions, masked and causal: GQA is ordinary attention on repeated k and v, and the gradient of a
// shared k/v head the sum over the query heads that read it.
TEST(LlamaForward, GroupedQueryAttentionIsAttentionOnRepeatedKv) {
  Rng rng(14);
  const int64_t B = 2, T = 7, KV = 2, G = 3, hs = 4, NH = KV * G, C = NH * hs;
  auto q = randn(rng, B * T * C), k = randn(rng, B * T * KV * hs), v = randn(rng, B * T * KV * hs);
  auto dout = randn(rng, B * T * C);
  std::vector<int32_t> mask(B * T, 1);
  mask[T - 1] = mask[T - 2] = 0;
  const auto k_rep = repeat_kv(k, B * T, KV, G, hs), v_rep = repeat_kv(v, B * T, KV, G, hs);
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "bidirectional, key mask");
    const int32_t* key_mask = causal ? nullptr : mask.data();
    const AttentionShape gqa{B, T, C, NH, C, causal, key_mask, KV, KV * hs}, mha{B, T, C, NH, C, causal, key_mask};
    std::vector<float> out(B * T * C), att(B * NH * T * T), out_ref(out.size()), att_ref(att.size());
    attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), gqa);
    attention_forward(out_ref.data(), att_ref.data(), q.data(), k_rep.data(), v_rep.data(), mha);
    expect_near(out, out_ref, "out");
    expect_near(att, att_ref, "probs");
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size()), dq_ref(q.size()), dk_rep(k_rep.size()),
        dv_rep(v_rep.size());
    attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), att.data(), gqa);
    attention_backward(dq_ref.data(), dk_rep.data(), dv_rep.data(), dout.data(), q.data(), k_rep.data(), v_rep.data(),
                       att_ref.data(), mha);
    expect_near(dq, dq_ref, "dq");
    expect_near(dk, sum_groups(dk_rep, B * T, KV, G, hs), "dk");
    expect_near(dv, sum_groups(dv_rep, B * T, KV, G, hs), "dv");
  }
}

TEST(LlamaForward, AttentionRefusesHeadsThatDoNotSplitOverKvHeads) {
  std::vector<float> buf(64);
  const AttentionShape shape{1, 2, 6, 3, 6, true, nullptr, 2, 4};
  EXPECT_THROW(attention_forward(buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), shape),
               std::invalid_argument);
}

// RMSNorm's sums (rows' squares, dw's column sums) add in one order whatever the thread count.
TEST(LlamaThreads, RmsNormIsBitwiseTheSameOnOneAndFourThreads) {
  Rng rng(15);
  const int64_t N = 301, C = 517;
  auto x = randn(rng, N * C), w = randn(rng, C), dout = randn(rng, N * C);
  auto run = [&](int threads) {
    const tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
    std::vector<float> out(N * C), rstd(N), dx(N * C), dw(C);
    tbb::task_arena(threads).execute([&] {
      rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
      rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    });
    std::vector<float> all = out;
    for (const auto* part : {&rstd, &dx, &dw}) all.insert(all.end(), part->begin(), part->end());
    return all;
  };
  const auto one = run(1), four = run(4);
  ASSERT_EQ(one.size(), four.size());
  EXPECT_EQ(std::memcmp(one.data(), four.data(), one.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(RandomShapes, GradCheck, ::testing::Range(0, 4));

}  // namespace
}  // namespace ferry::kernels::cpu
