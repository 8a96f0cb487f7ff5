// Host twins of the CUDA row and reduction kernels (kernels/cuda/twins.h) against the CPU ops of kernels/cpu:
// within fp32 tolerance where the reduction order differs, bitwise where the twin keeps the CPU's order.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "cpu_optim/kernels.h"
#include "kernels/cuda/twins.h"
#include "kernels/cpu/ops.h"

namespace ferry::kernels::cuda {
namespace {

std::vector<float> random_vector(int64_t n, uint32_t seed, float scale = 1.0f, float offset = 0.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = offset + d(gen);
  return v;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, float rel, float abs, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], abs + rel * std::abs(want[i])) << what << " at " << i;
}

// The gradient buffers of one backward call: its activation gradients (written over, or added into, as the call
// is told) and its parameters' (always added into).
struct Grads {
  std::vector<std::vector<float>> act, param;
};

// A backward twin in both modes: run(grads, false) on activation gradients full of NaN (`written`) and
// run(grads, true) on zeroed ones (`added`); the parameter gradients start from `param` in both.
struct BothModes {
  Grads written, added;
};

template <class Run>
BothModes run_both_modes(const std::vector<int64_t>& act_sizes, const std::vector<std::vector<float>>& param, Run run) {
  BothModes m{{{}, param}, {{}, param}};
  for (int64_t n : act_sizes) {
    m.written.act.emplace_back(n, std::numeric_limits<float>::quiet_NaN());
    m.added.act.emplace_back(n, 0.0f);
  }
  run(m.written, false);
  run(m.added, true);
  return m;
}

// Writing must give what adding into zeros gives, every element: one it skips keeps its NaN, one it reads spreads
// it; and the parameter gradients must be added into in both modes (written over, they would lose `param`).
template <class Run>
void expect_writing_equals_adding_to_zeros(const std::vector<int64_t>& act_sizes,
                                           const std::vector<std::vector<float>>& param, Run run, const char* what) {
  const BothModes m = run_both_modes(act_sizes, param, run);
  for (size_t k = 0; k < act_sizes.size(); ++k)
    for (size_t i = 0; i < m.written.act[k].size(); ++i)
      ASSERT_EQ(m.written.act[k][i], m.added.act[k][i]) << what << ": activation gradient " << k << " at " << i;
  for (size_t k = 0; k < param.size(); ++k)
    for (size_t i = 0; i < param[k].size(); ++i)
      ASSERT_EQ(m.written.param[k][i], m.added.param[k][i]) << what << ": parameter gradient " << k << " at " << i;
}

// Odd channel counts (fewer than a warp, not a multiple of the block, several trips per thread), and multiples of
// the 4 fp32 of a 16-byte pack (the vector path: GPT-2's 768, one pack per thread; 3 packs; 2048, 2 packs a thread).
struct Shape {
  int64_t N, C;
};
const Shape kShapes[] = {{1, 1}, {3, 7}, {5, 255}, {4, 257}, {6, 769}, {2, 2050}, {3, 768}, {2, 12}, {2, 2048}};

TEST(CudaTwins, LayerNormForwardMatchesCpuOp) {
  for (const auto [N, C] : kShapes) {
    const auto x = random_vector(N * C, 1, 2.0f, 3.0f), w = random_vector(C, 2), b = random_vector(C, 3);
    std::vector<float> out(N * C), mean(N), rstd(N), out2(N * C), mean2(N), rstd2(N);
    kernels::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    twin::layernorm_forward(out2.data(), mean2.data(), rstd2.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
    expect_near(mean2, mean, 1e-6f, 1e-6f, "mean");
    expect_near(rstd2, rstd, C > 1 ? 1e-5f : 1e-3f, 0.0f, "rstd");
    expect_near(out2, out, 1e-5f, 1e-5f, "out");
  }
}

TEST(CudaTwins, LayerNormBackwardMatchesCpuOp) {
  for (const auto [N, C] : kShapes) {
    const auto x = random_vector(N * C, 4), w = random_vector(C, 5), b = random_vector(C, 6);
    const auto dout = random_vector(N * C, 7);
    std::vector<float> out(N * C), mean(N), rstd(N);
    kernels::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    // Start from nonzero gradients: both accumulate.
    auto dx = random_vector(N * C, 8), dw = random_vector(C, 9), db = random_vector(C, 10);
    auto dx2 = dx, dw2 = dw, db2 = db;
    kernels::cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                                     rstd.data(), N, C);
    twin::layernorm_backward(dx2.data(), dw2.data(), db2.data(), dout.data(), x.data(), w.data(), mean.data(),
                             rstd.data(), N, C, true);
    expect_near(dx2, dx, 1e-5f, 2e-5f, "dx");
    expect_near(dw2, dw, 1e-5f, 1e-5f, "dw");
    expect_near(db2, db, 1e-5f, 1e-5f, "db");
  }
}

// Large N spreads the column sums over several chunks.
TEST(CudaTwins, LayerNormBackwardColumnChunks) {
  const int64_t N = 3 * kColumnChunkRows + 5, C = 33;
  const auto x = random_vector(N * C, 11), w = random_vector(C, 12), dout = random_vector(N * C, 13);
  std::vector<float> out(N * C), mean(N), rstd(N), b(C);
  kernels::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  std::vector<float> dx(N * C), dw(C), db(C), dx2(N * C), dw2(C), db2(C);
  kernels::cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                                   rstd.data(), N, C);
  twin::layernorm_backward(dx2.data(), dw2.data(), db2.data(), dout.data(), x.data(), w.data(), mean.data(),
                           rstd.data(), N, C, true);
  expect_near(dw2, dw, 1e-5f, 5e-5f, "dw");
  expect_near(db2, db, 1e-5f, 5e-5f, "db");
}

// RMSNorm: the shapes above, and rows enough for several column chunks of dw; a frozen weight (dw null).
TEST(CudaTwins, RmsNormMatchesCpuOp) {
  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  shapes.push_back({3 * kColumnChunkRows + 5, 33});
  for (const auto [N, C] : shapes) {
    const auto x = random_vector(N * C, 40, 2.0f, 1.0f), w = random_vector(C, 41), dout = random_vector(N * C, 42);
    std::vector<float> out(N * C), rstd(N), out2(N * C), rstd2(N);
    kernels::cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
    twin::rmsnorm_forward(out2.data(), rstd2.data(), x.data(), w.data(), N, C, 1e-6f);
    expect_near(rstd2, rstd, 1e-5f, 0.0f, "rstd");
    expect_near(out2, out, 1e-5f, 1e-5f, "out");
    auto dx = random_vector(N * C, 43), dw = random_vector(C, 44);  // both accumulate
    auto dx2 = dx, dw2 = dw, dx3 = dx;
    kernels::cpu::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    twin::rmsnorm_backward(dx2.data(), dw2.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C, true);
    expect_near(dx2, dx, 1e-5f, 2e-5f, "dx");
    expect_near(dw2, dw, 1e-5f, 5e-5f, "dw");
    twin::rmsnorm_backward(dx3.data(), static_cast<float*>(nullptr), dout.data(), x.data(), w.data(), rstd.data(), N, C,
                           true);
    EXPECT_EQ(dx3, dx2);
  }
}

// RoPE on a packed row (q of a fused q/k/v: elements past the heads untouched), Llama 3's scaling, a long
// sequence (large angles); backward adds the inverse rotation. Packs of 4 fp32 pairs where hs/2 and the row
// stride allow them (the first two), single pairs where not (an odd stride; hs/2 = 2, though the stride is 16).
TEST(CudaTwins, RopeMatchesCpuOp) {
  const kernels::cpu::RopeShape shapes[] = {{2, 5, 3, 8, 3 * 8 + 8, {}},
                                            {1, 3000, 2, 64, 128, {500000.0f, 8.0f, 1.0f, 4.0f, 8192.0f}},
                                            {2, 7, 4, 2, 11, {10000.0f, 32.0f, 1.0f, 4.0f, 4.0f}},
                                            {2, 5, 2, 4, 16, {}}};
  for (const auto& s : shapes) {
    const int64_t n = s.B * s.T * s.row_stride;
    const auto x = random_vector(n, 45);
    std::vector<float> out(n, 7.0f), out2(n, 7.0f);
    kernels::cpu::rope_forward(out.data(), x.data(), s);
    ASSERT_TRUE(twin::rope_forward(out2.data(), x.data(), s.B, s.T, s.H, s.hs, s.row_stride, s.scaling));
    expect_near(out2, out, 0.0f, 2e-6f, "out");
    auto dx = random_vector(n, 46), dx2 = dx;
    kernels::cpu::rope_backward(dx.data(), x.data(), s);
    ASSERT_TRUE(twin::rope_backward(dx2.data(), x.data(), s.B, s.T, s.H, s.hs, s.row_stride, s.scaling, true));
    expect_near(dx2, dx, 0.0f, 2e-6f, "dx");
  }
  std::vector<float> buf(64);
  EXPECT_FALSE(twin::rope_forward(buf.data(), buf.data(), 1, 2, 1, 5, 5, RopeScaling{}));  // odd head size
  EXPECT_FALSE(twin::rope_forward(buf.data(), buf.data(), 1, 1, 1, 2 * kMaxRopePairs + 2, 0, RopeScaling{}));
}

// Odd vocabularies, ignored targets (< 0), large logits (an exp without the running max would overflow); one a
// multiple of the fp32 pack (the vector path).
TEST(CudaTwins, CrossEntropyMatchesCpuOp) {
  const Shape shapes[] = {{3, 1}, {4, 31}, {5, 257}, {4, 5003}, {4, 768}};
  for (const auto [N, V] : shapes) {
    auto logits = random_vector(N * V, 14, 3.0f);
    for (int64_t i = 0; i < V; ++i) logits[i] += 80.0f;  // row 0 near e^88
    std::vector<int32_t> targets(N);
    for (int64_t r = 0; r < N; ++r) targets[r] = r % 3 == 1 ? -100 : static_cast<int32_t>((r * 7919) % V);
    std::vector<float> loss(N), loss2(N);
    kernels::cpu::cross_entropy_forward(loss.data(), logits.data(), targets.data(), N, V, V);
    twin::cross_entropy_forward(loss2.data(), logits.data(), targets.data(), N, V, V);
    expect_near(loss2, loss, 1e-5f, 1e-5f, "loss");
    auto d = random_vector(N * V, 15), d2 = d;
    kernels::cpu::cross_entropy_backward(d.data(), logits.data(), targets.data(), 0.25f, N, V, V);
    twin::cross_entropy_backward(d2.data(), logits.data(), targets.data(), loss2.data(), 0.25f, N, V, V, true);
    expect_near(d2, d, 1e-5f, 1e-6f, "dlogits");
    for (int64_t r = 0; r < N; ++r) {  // an ignored row is left exactly as it was
      if (targets[r] >= 0) continue;
      for (int64_t v = 0; v < V; ++v) ASSERT_EQ(d2[r * V + v], d[r * V + v]);
    }
  }
}

// A padded vocabulary (models/vocab.h): rows of `stride` logits whose columns past V hold values large enough to
// own the softmax if they entered it. The CPU op gives bitwise what it gives on the dense (N,V) logits; the twin
// (whose path, packs or single columns, follows the stride) what it gives with NaN in the padded columns; both
// leave the padded columns' gradients exactly as they were.
TEST(CudaTwins, CrossEntropyReadsOnlyTheFirstVColumnsOfAPaddedRow) {
  const Shape shapes[] = {{3, 1}, {4, 31}, {5, 257}, {4, 5003}};
  for (const auto [N, V] : shapes) {
    const int64_t stride = (V + 127) / 128 * 128 + (V % 128 == 0 ? 128 : 0);  // at least one padded column
    const auto dense = random_vector(N * V, 24, 3.0f);
    std::vector<float> padded(N * stride, 1e4f), padded_nan(N * stride, std::numeric_limits<float>::quiet_NaN());
    for (int64_t r = 0; r < N; ++r) {
      std::copy_n(dense.begin() + r * V, V, padded.begin() + r * stride);
      std::copy_n(dense.begin() + r * V, V, padded_nan.begin() + r * stride);
    }
    std::vector<int32_t> targets(N);
    for (int64_t r = 0; r < N; ++r) targets[r] = r % 3 == 1 ? -100 : static_cast<int32_t>((r * 7919) % V);

    std::vector<float> want(N), got(N), want_twin(N), got_twin(N);
    kernels::cpu::cross_entropy_forward(want.data(), dense.data(), targets.data(), N, V, V);
    kernels::cpu::cross_entropy_forward(got.data(), padded.data(), targets.data(), N, V, stride);
    twin::cross_entropy_forward(want_twin.data(), padded_nan.data(), targets.data(), N, V, stride);
    twin::cross_entropy_forward(got_twin.data(), padded.data(), targets.data(), N, V, stride);
    expect_near(got_twin, want, 1e-5f, 1e-5f, "twin loss against the cpu op");
    for (int64_t r = 0; r < N; ++r) {
      ASSERT_EQ(std::bit_cast<uint32_t>(got[r]), std::bit_cast<uint32_t>(want[r]))
          << "cpu loss, V " << V << " row " << r;
      ASSERT_EQ(std::bit_cast<uint32_t>(got_twin[r]), std::bit_cast<uint32_t>(want_twin[r])) << "twin loss, V " << V;
    }

    const auto d_dense = random_vector(N * V, 25);
    std::vector<float> d_padded(N * stride, 0.0f);
    for (int64_t r = 0; r < N; ++r) std::copy_n(d_dense.begin() + r * V, V, d_padded.begin() + r * stride);
    auto want_d = d_dense;
    auto got_d = d_padded, got_d_twin = d_padded;
    kernels::cpu::cross_entropy_backward(want_d.data(), dense.data(), targets.data(), 0.25f, N, V, V);
    kernels::cpu::cross_entropy_backward(got_d.data(), padded.data(), targets.data(), 0.25f, N, V, stride);
    auto want_d_twin = d_padded;
    twin::cross_entropy_backward(want_d_twin.data(), padded_nan.data(), targets.data(), want_twin.data(), 0.25f, N, V,
                                 stride, true);
    twin::cross_entropy_backward(got_d_twin.data(), padded.data(), targets.data(), got_twin.data(), 0.25f, N, V, stride,
                                 true);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t v = 0; v < stride; ++v) {
        const float cpu = got_d[r * stride + v], twin = got_d_twin[r * stride + v];
        if (v >= V) {  // a padded column: untouched, its gradient stays zero
          ASSERT_EQ(cpu, 0.0f) << "cpu dlogits, V " << V << " padded column " << v;
          ASSERT_EQ(twin, 0.0f) << "twin dlogits, V " << V << " padded column " << v;
          continue;
        }
        ASSERT_EQ(std::bit_cast<uint32_t>(cpu), std::bit_cast<uint32_t>(want_d[r * V + v])) << "cpu dlogits, V " << V;
        ASSERT_EQ(std::bit_cast<uint32_t>(twin), std::bit_cast<uint32_t>(want_d_twin[r * stride + v]))
            << "twin dlogits";
        ASSERT_NEAR(twin, want_d[r * V + v], 1e-5f + 1e-5f * std::abs(want_d[r * V + v])) << "twin dlogits, V " << V;
      }
  }
}

// The sum of squares against the CPU optimizer's (a double sum in index order), and the inf/nan flag
// wherever the bad value is.
TEST(CudaTwins, SumSquaresAndNonFiniteFlag) {
  for (int64_t n : {int64_t{1}, int64_t{31}, int64_t{4097}, int64_t{1000003}}) {
    const auto g = random_vector(n, 16);
    const double want = cpu_optim::detail::sum_squares_scalar(g.data(), DType::F32, 0, n);
    const SquaresState s = twin::sum_squares(g.data(), n);
    EXPECT_NEAR(s.sum, want, 1e-12 * want) << n;
    EXPECT_EQ(s.nonfinite, 0u);
    for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
      auto h = g;
      h[n - 1] = bad;
      EXPECT_EQ(twin::sum_squares(h.data(), n).nonfinite, 1u) << n;
    }
  }
  std::vector<Bf16> b(1000);
  for (size_t i = 0; i < b.size(); ++i) b[i].bits = float_to_bf16(0.5f);
  EXPECT_EQ(twin::sum_squares(b.data(), 1000).sum, 250.0);
}

// dwte and dwpe keep the CPU's summation order: bitwise equal in fp32; the token-type row within tolerance.
TEST(CudaTwins, EmbeddingBackwardMatchesCpuOp) {
  const int64_t B = 3, T = 37, C = 261, V = 11, maxT = 40;
  std::vector<int32_t> tokens(B * T);
  for (int64_t i = 0; i < B * T; ++i) tokens[i] = static_cast<int32_t>((i * i + 3 * i) % V);  // repeats
  const auto dout = random_vector(B * T * C, 17);
  auto dwte = random_vector(V * C, 18), dwpe = random_vector(maxT * C, 19), dtype = random_vector(C, 20);
  auto dwte2 = dwte, dwpe2 = dwpe, dtype2 = dtype;
  kernels::cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, dtype.data());
  twin::embedding_backward(dwte2.data(), dwpe2.data(), dout.data(), tokens.data(), B, T, C, dtype2.data());
  for (int64_t i = 0; i < V * C; ++i) ASSERT_EQ(std::bit_cast<uint32_t>(dwte2[i]), std::bit_cast<uint32_t>(dwte[i])) << i;
  for (int64_t i = 0; i < maxT * C; ++i) ASSERT_EQ(std::bit_cast<uint32_t>(dwpe2[i]), std::bit_cast<uint32_t>(dwpe[i])) << i;
  expect_near(dtype2, dtype, 1e-5f, 1e-4f, "dtype");
}

// bf16 storage: the twin widens, computes in fp32 and rounds once; within bf16 precision of the fp32 twin.
TEST(CudaTwins, LayerNormBf16StorageWithinBf16Tolerance) {
  const int64_t N = 4, C = 300;
  const auto xf = random_vector(N * C, 21), wf = random_vector(C, 22), bf = random_vector(C, 23);
  std::vector<Bf16> x(N * C), w(C), b(C), out(N * C);
  std::vector<float> xr(N * C), wr(C), br(C);
  for (int64_t i = 0; i < N * C; ++i) x[i].bits = float_to_bf16(xf[i]), xr[i] = load(x.data(), i);
  for (int64_t i = 0; i < C; ++i) w[i].bits = float_to_bf16(wf[i]), b[i].bits = float_to_bf16(bf[i]);
  for (int64_t i = 0; i < C; ++i) wr[i] = load(w.data(), i), br[i] = load(b.data(), i);
  std::vector<float> mean(N), rstd(N), outf(N * C);
  twin::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
  twin::layernorm_forward(outf.data(), mean.data(), rstd.data(), xr.data(), wr.data(), br.data(), N, C, 1e-5f);
  for (int64_t i = 0; i < N * C; ++i) ASSERT_EQ(out[i].bits, float_to_bf16(outf[i])) << i;
}

// The elementwise twins keep the CPU ops' expressions: bitwise in fp32.
TEST(CudaTwins, ResidualAndEmbeddingForwardMatchCpuOpBitwise) {
  const int64_t B = 2, T = 5, C = 33, V = 9, N = B * T * C;
  std::vector<int32_t> tokens(B * T);
  for (int64_t i = 0; i < B * T; ++i) tokens[i] = static_cast<int32_t>(i * 5 % V);
  const auto wte = random_vector(V * C, 30), wpe = random_vector(T * C, 31), type = random_vector(C, 32);
  for (const float* ty : {static_cast<const float*>(nullptr), type.data()}) {
    std::vector<float> out(N), out2(N);
    kernels::cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, ty);
    twin::embedding_forward(out2.data(), tokens.data(), wte.data(), wpe.data(), ty, B, T, C);
    for (int64_t i = 0; i < N; ++i) ASSERT_EQ(std::bit_cast<uint32_t>(out2[i]), std::bit_cast<uint32_t>(out[i])) << i;
  }
  const auto a = random_vector(N, 33), b = random_vector(N, 34);
  std::vector<float> sum(N), sum2(N);
  auto da = random_vector(N, 35), db = random_vector(N, 36), da2 = da, db2 = db;
  kernels::cpu::residual_forward(sum.data(), a.data(), b.data(), N);
  kernels::cpu::residual_backward(da.data(), db.data(), a.data(), N);
  twin::residual_forward(sum2.data(), a.data(), b.data(), N);
  twin::residual_backward(da2.data(), db2.data(), a.data(), N, true);
  EXPECT_EQ(sum2, sum);
  EXPECT_EQ(da2, da);
  EXPECT_EQ(db2, db);
}

// SwiGLU's twin against the CPU op (exp_f against libm's exp: within fp32 tolerance), accumulating.
TEST(CudaTwins, SwiGluMatchesCpuOp) {
  const int64_t N = 4099;
  const auto gate = random_vector(N, 47, 4.0f), up = random_vector(N, 48), dout = random_vector(N, 49);
  std::vector<float> out(N), out2(N);
  kernels::cpu::swiglu_forward(out.data(), gate.data(), up.data(), N);
  twin::swiglu_forward(out2.data(), gate.data(), up.data(), N);
  expect_near(out2, out, 1e-6f, 1e-6f, "out");
  auto dg = random_vector(N, 50), du = random_vector(N, 51), dg2 = dg, du2 = du;
  kernels::cpu::swiglu_backward(dg.data(), du.data(), dout.data(), gate.data(), up.data(), N);
  twin::swiglu_backward(dg2.data(), du2.data(), dout.data(), gate.data(), up.data(), N, true);
  expect_near(dg2, dg, 1e-6f, 1e-6f, "dgate");
  expect_near(du2, du, 1e-6f, 1e-6f, "dup");
}

// ---- Told not to accumulate (the op is the first to produce its activation gradients), every backward twin
// writes them: what it gives on NaN garbage equals what it adds into zeros, and parameter gradients still add.

TEST(CudaTwins, NormsWriteTheirInputGradientWhenNotAccumulating) {
  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  shapes.push_back({3 * kColumnChunkRows + 5, 33});
  for (const auto [N, C] : shapes) {
    const auto x = random_vector(N * C, 60, 2.0f, 1.0f), w = random_vector(C, 61), b = random_vector(C, 62);
    const auto dout = random_vector(N * C, 63);
    std::vector<float> out(N * C), mean(N), rstd(N), rms_rstd(N);
    twin::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
    twin::rmsnorm_forward(out.data(), rms_rstd.data(), x.data(), w.data(), N, C, 1e-6f);
    expect_writing_equals_adding_to_zeros(
        {N * C}, {random_vector(C, 64), random_vector(C, 65)},
        [&](Grads& g, bool accumulate) {
          twin::layernorm_backward(g.act[0].data(), g.param[0].data(), g.param[1].data(), dout.data(), x.data(),
                                   w.data(), mean.data(), rstd.data(), N, C, accumulate);
        },
        "layernorm");
    expect_writing_equals_adding_to_zeros(
        {N * C}, {random_vector(C, 66)},
        [&](Grads& g, bool accumulate) {
          twin::rmsnorm_backward(g.act[0].data(), g.param[0].data(), dout.data(), x.data(), w.data(), rms_rstd.data(),
                                 N, C, accumulate);
        },
        "rmsnorm");
  }
}

TEST(CudaTwins, ElementwiseBackwardsWriteWhenNotAccumulating) {
  const int64_t N = 4099;
  const auto x = random_vector(N, 70, 3.0f), up = random_vector(N, 71), dout = random_vector(N, 72);
  for (bool exact : {false, true})
    expect_writing_equals_adding_to_zeros(
        {N}, {},
        [&](Grads& g, bool accumulate) {
          twin::gelu_backward(g.act[0].data(), dout.data(), x.data(), N, exact, accumulate);
        },
        "gelu");
  expect_writing_equals_adding_to_zeros(
      {N, N}, {},
      [&](Grads& g, bool accumulate) {
        twin::swiglu_backward(g.act[0].data(), g.act[1].data(), dout.data(), x.data(), up.data(), N, accumulate);
      },
      "swiglu");
  expect_writing_equals_adding_to_zeros(
      {N, N}, {},
      [&](Grads& g, bool accumulate) {
        twin::residual_backward(g.act[0].data(), g.act[1].data(), dout.data(), N, accumulate);
      },
      "residual");
}

// RoPE writes the rotated heads of a packed row, and nothing past them (the rest of the row is another op's).
TEST(CudaTwins, RopeBackwardWritesItsHeadsWhenNotAccumulating) {
  const kernels::cpu::RopeShape shapes[] = {{2, 5, 3, 8, 3 * 8 + 8, {}},
                                            {1, 300, 2, 64, 128, {500000.0f, 8.0f, 1.0f, 4.0f, 8192.0f}},
                                            {2, 7, 4, 2, 11, {10000.0f, 32.0f, 1.0f, 4.0f, 4.0f}}};
  for (const auto& s : shapes) {
    const int64_t n = s.B * s.T * s.row_stride;
    const auto dout = random_vector(n, 73);
    const BothModes m = run_both_modes({n}, {}, [&](Grads& g, bool accumulate) {
      ASSERT_TRUE(
          twin::rope_backward(g.act[0].data(), dout.data(), s.B, s.T, s.H, s.hs, s.row_stride, s.scaling, accumulate));
    });
    for (int64_t i = 0; i < n; ++i) {
      const float written = m.written.act[0][i], added = m.added.act[0][i];
      if (i % s.row_stride < s.H * s.hs) ASSERT_EQ(written, added) << "rope dx at " << i;
      else ASSERT_TRUE(std::isnan(written) && added == 0.0f) << "rope touched " << i << ", past the heads of its row";
    }
  }
}

// Cross-entropy writes every element of its rows: the softmax's gradient in the first V columns, zeros in a padded
// vocabulary's columns and in the rows without a target.
TEST(CudaTwins, CrossEntropyBackwardWritesEveryColumnWhenNotAccumulating) {
  const Shape shapes[] = {{3, 1}, {4, 31}, {5, 257}, {4, 5003}};
  for (const auto [N, V] : shapes)
    for (const int64_t stride : {V, (V + 127) / 128 * 128 + (V % 128 == 0 ? 128 : 0)}) {
      const auto logits = random_vector(N * stride, 74, 3.0f);
      std::vector<int32_t> targets(N);
      for (int64_t r = 0; r < N; ++r) targets[r] = r % 3 == 1 ? -100 : static_cast<int32_t>((r * 7919) % V);
      std::vector<float> losses(N);
      twin::cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, stride);
      expect_writing_equals_adding_to_zeros(
          {N * stride}, {},
          [&](Grads& g, bool accumulate) {
            twin::cross_entropy_backward(g.act[0].data(), logits.data(), targets.data(), losses.data(), 0.25f, N, V,
                                         stride, accumulate);
          },
          "cross-entropy");
      // Written over its own logits, as a step writes it: the same bits (each row's lse is read before it writes).
      std::vector<float> apart(N * stride), in_place = logits;
      twin::cross_entropy_backward(apart.data(), logits.data(), targets.data(), losses.data(), 0.25f, N, V, stride,
                                   false);
      twin::cross_entropy_backward(in_place.data(), in_place.data(), targets.data(), losses.data(), 0.25f, N, V, stride,
                                   false);
      for (int64_t i = 0; i < N * stride; ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(in_place[i]), std::bit_cast<uint32_t>(apart[i])) << "in place, at " << i;
    }
}

// ---- Both paths of the twins (pack.h): 16-byte packs where the shape and every pointer allow them, single
// elements where they do not (C = 37, or every operand one element past a 16-byte boundary).

// Values in storage T, `offset` elements into an allocation (new's 16-byte alignment): p is aligned at offset 0,
// 2 or 4 bytes off it at offset 1.
template <class T>
struct Stored {
  Stored(const std::vector<float>& v, int offset) : buf(v.size() + 8), p(buf.data() + offset), n(v.size()) {
    for (size_t i = 0; i < n; ++i) store(p, static_cast<int64_t>(i), v[i]);
  }
  std::vector<float> values() const {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = load(p, static_cast<int64_t>(i));
    return v;
  }
  std::vector<T> buf;
  T* p;
  size_t n;
};

template <class T>
int expected_width(int64_t C, int offset) {
  return offset == 0 && C % kPackWidth<T> == 0 ? kPackWidth<T> : 1;
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// LayerNorm forward and backward (writing dx over NaN) in storage T on the path (C, offset) gives, against the CPU
// op on the stored values.
template <class T>
void expect_layernorm_twin_near_cpu(int64_t N, int64_t C, int offset, float tol) {
  const Stored<T> x(random_vector(N * C, 80, 2.0f, 1.0f), offset), w(random_vector(C, 81), offset),
      b(random_vector(C, 82), offset), dout(random_vector(N * C, 83), offset);
  Stored<T> out(std::vector<float>(N * C), offset), dx(std::vector<float>(N * C, kNaN), offset),
      dw(std::vector<float>(C), offset), db(std::vector<float>(C), offset);
  ASSERT_EQ(row_map_for<T>(N, C, C, out.p, x.p, w.p, b.p).width, expected_width<T>(C, offset));
  std::vector<float> mean(N), rstd(N), want(N * C), want_mean(N), want_rstd(N);
  twin::layernorm_forward(out.p, mean.data(), rstd.data(), x.p, w.p, b.p, N, C, 1e-5f);
  kernels::cpu::layernorm_forward(want.data(), want_mean.data(), want_rstd.data(), x.values().data(), w.values().data(),
                                  b.values().data(), N, C);
  expect_near(out.values(), want, tol, tol, "layernorm out");
  expect_near(rstd, want_rstd, 1e-5f, 0.0f, "layernorm rstd");
  std::vector<float> want_dx(N * C), want_dw(C), want_db(C);
  twin::layernorm_backward(dx.p, dw.p, db.p, dout.p, x.p, w.p, mean.data(), rstd.data(), N, C, false);
  kernels::cpu::layernorm_backward(want_dx.data(), want_dw.data(), want_db.data(), dout.values().data(),
                                   x.values().data(), w.values().data(), mean.data(), rstd.data(), N, C);
  expect_near(dx.values(), want_dx, tol, tol, "layernorm dx");
  expect_near(dw.values(), want_dw, tol, tol, "layernorm dw");
}

template <class T>
void expect_rmsnorm_twin_near_cpu(int64_t N, int64_t C, int offset, float tol) {
  const Stored<T> x(random_vector(N * C, 84, 2.0f, 1.0f), offset), w(random_vector(C, 85), offset),
      dout(random_vector(N * C, 86), offset);
  Stored<T> out(std::vector<float>(N * C), offset), dx(std::vector<float>(N * C, kNaN), offset);
  ASSERT_EQ(row_map_for<T>(N, C, C, out.p, x.p, w.p).width, expected_width<T>(C, offset));
  std::vector<float> rstd(N), want(N * C), want_rstd(N), want_dx(N * C);
  twin::rmsnorm_forward(out.p, rstd.data(), x.p, w.p, N, C, 1e-6f);
  kernels::cpu::rmsnorm_forward(want.data(), want_rstd.data(), x.values().data(), w.values().data(), N, C, 1e-6f);
  expect_near(out.values(), want, tol, tol, "rmsnorm out");
  twin::rmsnorm_backward(dx.p, static_cast<T*>(nullptr), dout.p, x.p, w.p, rstd.data(), N, C, false);
  kernels::cpu::rmsnorm_backward(want_dx.data(), nullptr, dout.values().data(), x.values().data(), w.values().data(),
                                 rstd.data(), N, C);
  expect_near(dx.values(), want_dx, tol, tol, "rmsnorm dx");
}

template <class T>
void expect_cross_entropy_twin_near_cpu(int64_t N, int64_t V, int offset, float tol) {
  const Stored<T> logits(random_vector(N * V, 87, 3.0f), offset);
  Stored<T> d(std::vector<float>(N * V, kNaN), offset);
  ASSERT_EQ(row_map_for<T>(N, V, V, d.p, logits.p).width, expected_width<T>(V, offset));
  std::vector<int32_t> targets(N);
  for (int64_t r = 0; r < N; ++r) targets[r] = r == 1 ? -100 : static_cast<int32_t>((r * 7919) % V);
  std::vector<float> loss(N), want(N), want_d(N * V);
  twin::cross_entropy_forward(loss.data(), logits.p, targets.data(), N, V, V);
  kernels::cpu::cross_entropy_forward(want.data(), logits.values().data(), targets.data(), N, V, V);
  expect_near(loss, want, 1e-5f, 1e-5f, "cross-entropy loss");
  twin::cross_entropy_backward(d.p, logits.p, targets.data(), loss.data(), 0.25f, N, V, V, false);
  kernels::cpu::cross_entropy_backward(want_d.data(), logits.values().data(), targets.data(), 0.25f, N, V, V);
  expect_near(d.values(), want_d, tol, 1e-6f, "cross-entropy dlogits");
}

template <class T>
void expect_row_twins_near_cpu_on_both_paths(float tol) {
  for (const int64_t C : {768, 37, 8})
    for (const int offset : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "C " << C << ", offset " << offset);
      expect_layernorm_twin_near_cpu<T>(3, C, offset, tol);
      expect_rmsnorm_twin_near_cpu<T>(3, C, offset, tol);
      expect_cross_entropy_twin_near_cpu<T>(3, C, offset, tol);
    }
}

TEST(CudaTwins, RowTwinsMatchCpuOpOnBothPathsFp32) { expect_row_twins_near_cpu_on_both_paths<float>(2e-5f); }
TEST(CudaTwins, RowTwinsMatchCpuOpOnBothPathsBf16) { expect_row_twins_near_cpu_on_both_paths<Bf16>(2e-2f); }

// The elementwise twins on n elements at `offset`, every output gathered (backward writing over NaN and adding
// into the same random start).
template <class T>
std::vector<float> elementwise_outputs(int64_t n, int offset) {
  const Stored<T> x(random_vector(n, 90, 3.0f), offset), y(random_vector(n, 91), offset),
      d(random_vector(n, 92), offset);
  std::vector<float> all;
  const auto run = [&](const std::vector<float>& start, auto op) {
    Stored<T> a(start, offset), b(start, offset);
    op(a.p, b.p);
    for (const auto* s : {&a, &b})
      for (float v : s->values()) all.push_back(v);
  };
  const auto nan = std::vector<float>(n, kNaN), some = random_vector(n, 93);
  for (bool exact : {false, true}) {
    run(nan, [&](T* out, T*) { twin::gelu_forward(out, x.p, n, exact); });
    for (const auto& start : {nan, some})
      run(start, [&](T* dx, T*) { twin::gelu_backward(dx, d.p, x.p, n, exact, start == some); });
  }
  run(nan, [&](T* out, T*) { twin::swiglu_forward(out, x.p, y.p, n); });
  run(nan, [&](T* out, T*) { twin::residual_forward(out, x.p, y.p, n); });
  for (bool accumulate : {false, true}) {
    const auto& start = accumulate ? some : nan;
    run(start, [&](T* dg, T* du) { twin::swiglu_backward(dg, du, d.p, x.p, y.p, n, accumulate); });
    run(start, [&](T* da, T* db) { twin::residual_backward(da, db, d.p, n, accumulate); });
  }
  return all;
}

// The vector path gives the scalar path's bits (one element's math whatever the pack), every element of every
// output: a lane misplaced, skipped or read from the wrong operand would differ.
template <class T>
void expect_elementwise_paths_bitwise_equal() {
  const int64_t n = 4096 + 8 * 3;
  Stored<T> probe(std::vector<float>(8), 0), off(std::vector<float>(8), 1);
  ASSERT_EQ(elementwise_map_for<T>(n, probe.p).width, kPackWidth<T>);
  ASSERT_EQ(elementwise_map_for<T>(n, off.p).width, 1);
  const auto packed = elementwise_outputs<T>(n, 0), single = elementwise_outputs<T>(n, 1);
  ASSERT_EQ(packed.size(), single.size());
  for (size_t i = 0; i < packed.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(packed[i]), std::bit_cast<uint32_t>(single[i])) << "output element " << i;
}

TEST(CudaTwins, ElementwisePathsGiveTheSameBitsFp32) { expect_elementwise_paths_bitwise_equal<float>(); }
TEST(CudaTwins, ElementwisePathsGiveTheSameBitsBf16) { expect_elementwise_paths_bitwise_equal<Bf16>(); }

// RoPE takes packs of pairs when hs/2 and the row stride are multiples of the pack (Llama's q in a packed row): the
// same bits as single pairs (pointers one element off), forward and backward writing and adding, and nothing
// written past the heads (NaN kept there).
template <class T>
void expect_rope_paths_bitwise_equal() {
  const int64_t B = 2, Tn = 9, H = 3, hs = 64, rs = (H + 2) * hs, n = B * Tn * rs;
  const RopeScaling scaling{500000.0f, 8.0f, 1.0f, 4.0f, 8192.0f};
  RopeArgs a;
  ASSERT_TRUE(rope_args(&a, B, Tn, H, hs, rs, scaling));
  std::vector<std::vector<float>> outs;
  for (const int offset : {0, 1}) {
    const Stored<T> x(random_vector(n, 97), offset);
    Stored<T> out(std::vector<float>(n, kNaN), offset), dx(std::vector<float>(n, kNaN), offset),
        added(random_vector(n, 98), offset);
    ASSERT_EQ(rope_map(a, out.p, x.p).width, offset == 0 ? kPackWidth<T> : 1);
    ASSERT_TRUE(twin::rope_forward(out.p, x.p, B, Tn, H, hs, rs, scaling));
    ASSERT_TRUE(twin::rope_backward(dx.p, x.p, B, Tn, H, hs, rs, scaling, false));
    ASSERT_TRUE(twin::rope_backward(added.p, x.p, B, Tn, H, hs, rs, scaling, true));
    outs.emplace_back();
    for (const auto* s : {&out, &dx, &added})
      for (float v : s->values()) outs.back().push_back(v);
  }
  for (size_t i = 0; i < outs[0].size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(outs[0][i]), std::bit_cast<uint32_t>(outs[1][i])) << "output element " << i;
}

TEST(CudaTwins, RopePathsGiveTheSameBitsFp32) { expect_rope_paths_bitwise_equal<float>(); }
TEST(CudaTwins, RopePathsGiveTheSameBitsBf16) { expect_rope_paths_bitwise_equal<Bf16>(); }

// A twin's 16-byte pack access at an address the device cannot read in one access throws, as the kernel would
// fault: a full pack one bf16 off alignment, read or written. A partial pack (written lane by lane on the device
// too) and single elements do not.
TEST(CudaTwins, PackAccessesOffAlignmentThrowAsTheDeviceFaults) {
  alignas(16) Bf16 buf[24] = {};
  float v[8] = {};
  EXPECT_NO_THROW(load_pack<8>(buf, 8, v));
  EXPECT_NO_THROW(store_pack<8>(buf, 8, v));
  EXPECT_THROW(load_pack<8>(buf, 1, v), std::logic_error);
  EXPECT_THROW(store_pack<8>(buf, 1, v), std::logic_error);
  EXPECT_NO_THROW(store_pack<8>(buf, 1, v, 7));
  EXPECT_NO_THROW(load_pack<1>(buf, 1, v));
}

// RoPE in a packed row whose stride is not a multiple of the pack (half a pack more than three heads), its
// pointers aligned: row 1's packs would start 8 bytes off 16-byte alignment, so the path is single pairs; the twin
// runs it (on packs its 16-byte accesses would throw, where the kernel's would fault).
template <class T>
void expect_rope_odd_row_stride_takes_single_pairs() {
  const int64_t B = 2, Tn = 3, H = 2, hs = 64, rs = 3 * hs + kPackWidth<T> / 2, n = B * Tn * rs;
  RopeArgs a;
  ASSERT_TRUE(rope_args(&a, B, Tn, H, hs, rs, RopeScaling{}));
  const Stored<T> x(random_vector(n, 99), 0);
  Stored<T> out(std::vector<float>(n, kNaN), 0);
  EXPECT_EQ(rope_map(a, out.p, x.p).width, 1);
  EXPECT_NO_THROW(twin::rope_forward(out.p, x.p, B, Tn, H, hs, rs, RopeScaling{}));
  EXPECT_NO_THROW(twin::rope_backward(out.p, x.p, B, Tn, H, hs, rs, RopeScaling{}, true));
}

TEST(CudaTwins, RopeOddRowStrideTakesSinglePairs) {
  expect_rope_odd_row_stride_takes_single_pairs<float>();
  expect_rope_odd_row_stride_takes_single_pairs<Bf16>();
}

// Embedding forward takes packs when C is a multiple of the pack (each pack one row's): the same bits as single
// elements, and as the CPU op in fp32.
TEST(CudaTwins, EmbeddingForwardPathsGiveTheSameBits) {
  const int64_t B = 2, T = 5, C = 64, V = 9;
  std::vector<int32_t> tokens(B * T);
  for (int64_t i = 0; i < B * T; ++i) tokens[i] = static_cast<int32_t>(i * 5 % V);
  const auto wte_v = random_vector(V * C, 94), wpe_v = random_vector(T * C, 95), type_v = random_vector(C, 96);
  std::vector<std::vector<float>> outs;
  for (const int offset : {0, 1}) {
    const Stored<float> wte(wte_v, offset), wpe(wpe_v, offset), type(type_v, offset);
    Stored<float> out(std::vector<float>(B * T * C, kNaN), offset);
    ASSERT_EQ(embedding_forward_map(out.p, wte.p, wpe.p, type.p, B * T * C, C).width, offset == 0 ? 4 : 1);
    twin::embedding_forward(out.p, tokens.data(), wte.p, wpe.p, type.p, B, T, C);
    outs.push_back(out.values());
  }
  std::vector<float> want(B * T * C);
  kernels::cpu::embedding_forward(want.data(), tokens.data(), wte_v.data(), wpe_v.data(), B, T, C, type_v.data());
  for (int64_t i = 0; i < B * T * C; ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(outs[0][i]), std::bit_cast<uint32_t>(want[i])) << "packs, element " << i;
    ASSERT_EQ(std::bit_cast<uint32_t>(outs[1][i]), std::bit_cast<uint32_t>(want[i])) << "single, element " << i;
  }
}

}  // namespace
}  // namespace ferry::kernels::cuda
