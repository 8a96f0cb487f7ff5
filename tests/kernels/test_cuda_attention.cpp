// The flash attention's host twin (kernels/cuda/attention_twin.h) against the CPU attention op
// (kernels/cpu/attention.cpp): fp32 tightly, bf16/fp16 storage within their rounding; causal and padded, a
// query with no visible key, T not a multiple of the tile, packed qkv (row_stride 3C), head sizes 32, 64, 96,
// grouped-query attention (Llama: fewer key/value heads, packed or in their own narrower tensors).
// cuDNN's SDPA as described to it (attention_sdpa_desc.h) through a naive host attention.
// With CUDA: the kernels against the twin bitwise and run to run (skipped where no device is present), and
// cuDNN's SDPA against the twin within bf16 tolerance where cuDNN loads.
#include <gtest/gtest.h>

#include "test_helpers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/attention_sdpa_desc.h"
#include "kernels/cuda/attention_twin.h"
#include "kernels/cpu/ops.h"

#if defined(FERRY_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "kernels/cuda/attention.h"
#endif

namespace ferry::kernels::cuda {
namespace {

// A case: shapes, masks, and whether q, k, v are one packed (B,T,C+2KVC) tensor (GPT-2, a fused Llama q/k/v)
// or three, (B,T,C) and (B,T,KVC) (BERT), KVC = KV * hs.
struct Case {
  int64_t B, T, C, NH;
  bool packed, causal;
  int mask;        // 0: none; 1: trailing padding per batch row; 2: as 1 and key 0 of batch row 0 is padding too
  int64_t KV = 0;  // key/value heads; 0: NH
  int64_t kv_heads() const { return KV ? KV : NH; }
  int64_t kv_channels() const { return kv_heads() * (C / NH); }
};

// Odd T (1, 37, 70, 130: tiles of 64 not full), 1..3 key tiles; hs 32, 64, 96 (both instantiations).
const Case kCases[] = {
    {2, 37, 64, 2, true, true, 0},       // GPT-2: causal, packed, hs 32
    {2, 130, 128, 2, false, false, 1},   // BERT: padding, hs 64, 3 tiles
    {2, 70, 192, 2, true, true, 2},      // causal + padding: query 0 of batch 0 sees no key; hs 96
    {1, 1, 64, 1, false, false, 0},      // a single token
    {3, 64, 128, 2, false, true, 1},     // exactly one tile
    {4, 20, 64, 2, false, false, 1},     // batch row 3 all padding: none of its queries sees a key
    {2, 70, 128, 4, true, true, 0, 2},   // Llama: 4 query heads on 2 key/value heads, packed, hs 32
    {2, 37, 256, 4, false, true, 1, 1},  // multi-query: one key/value head in its own tensors, padding, hs 64
};

// Tensors of a case in fp32: q, k, v views into `in`, dq, dk, dv views into `grad` (same layout); k and v
// rows krs apart.
struct Tensors {
  std::vector<float> in, grad, dout;
  std::vector<int32_t> mask;
  int64_t rs, krs, k_off, v_off;
};

Tensors make_tensors(const Case& c, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  Tensors t;
  const int64_t KVC = c.kv_channels();
  t.rs = c.packed ? c.C + 2 * KVC : c.C;
  t.krs = c.packed ? t.rs : KVC;
  t.k_off = c.packed ? c.C : c.B * c.T * c.C;
  t.v_off = t.k_off + (c.packed ? KVC : c.B * c.T * KVC);
  t.in.resize(c.B * c.T * (c.C + 2 * KVC));
  for (float& x : t.in) x = 1.5f * n(gen);
  t.grad.resize(t.in.size());
  for (float& x : t.grad) x = n(gen);
  t.dout.resize(c.B * c.T * c.C);
  for (float& x : t.dout) x = n(gen);
  if (c.mask) {
    t.mask.assign(c.B * c.T, 1);
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t i = c.T - (b * c.T) / 3; i < c.T; ++i) t.mask[b * c.T + i] = 0;  // batch row b: T b/3 padding
    if (c.mask == 2) t.mask[0] = 0;
  }
  return t;
}

attn::Geometry geometry_of(const Case& c, const Tensors& t) {
  return attn::make_geometry(c.B, c.T, c.C, c.NH, t.rs, c.causal, c.kv_heads(), t.krs);
}

// The CPU op's out and gradients (dq, dk, dv accumulated into a copy of t.grad).
struct Reference {
  std::vector<float> out, grad;
};

Reference cpu_reference(const Case& c, const Tensors& t) {
  const float* in = t.in.data();
  const kernels::cpu::AttentionShape s{c.B,  c.T,  c.C, c.NH, t.rs, c.causal, c.mask ? t.mask.data() : nullptr,
                                       c.KV, t.krs};
  Reference r{std::vector<float>(c.B * c.T * c.C), t.grad};
  std::vector<float> att(c.B * c.NH * c.T * c.T);
  kernels::cpu::attention_forward(r.out.data(), att.data(), in, in + t.k_off, in + t.v_off, s);
  float* g = r.grad.data();
  kernels::cpu::attention_backward(g, g + t.k_off, g + t.v_off, t.dout.data(), in, in + t.k_off, in + t.v_off,
                                   att.data(), s);
  return r;
}

// Each query's log-sum-exp of its scaled, visible scores, in double (-inf where none is visible).
std::vector<double> reference_lse(const Case& c, const Tensors& t) {
  const int64_t hs = c.C / c.NH;
  std::vector<double> lse(c.B * c.NH * c.T);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.NH; ++h)
      for (int64_t i = 0; i < c.T; ++i) {
        std::vector<double> s;
        for (int64_t j = 0; j < c.T; ++j) {
          if ((c.causal && j > i) || (c.mask && t.mask[b * c.T + j] == 0)) continue;
          double dot = 0;
          for (int64_t ch = 0; ch < hs; ++ch)
            dot += double{t.in[(b * c.T + i) * t.rs + h * hs + ch]} *
                   t.in[t.k_off + (b * c.T + j) * t.krs + h / (c.NH / c.kv_heads()) * hs + ch];
          s.push_back(dot / std::sqrt(double(hs)));
        }
        double m = -INFINITY, sum = 0;
        for (double x : s) m = std::max(m, x);
        for (double x : s) sum += std::exp(x - m);
        lse[(b * c.NH + h) * c.T + i] = s.empty() ? -INFINITY : m + std::log(sum);
      }
  return lse;
}

template <class T>
std::vector<T> to_storage(const std::vector<float>& v) {
  std::vector<T> s(v.size());
  for (size_t i = 0; i < v.size(); ++i) store(s.data(), static_cast<int64_t>(i), v[i]);
  return s;
}

template <class T>
std::vector<float> to_float(const std::vector<T>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = load(v.data(), static_cast<int64_t>(i));
  return f;
}

// |got - want| <= abs + rel |want| everywhere (abs relative to the tensor's largest magnitude).
void expect_close(const std::vector<float>& got, const std::vector<float>& want, float rel, float abs_of_max,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size());
  float mx = 0;
  for (float w : want) mx = std::max(mx, std::abs(w));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], abs_of_max * mx + rel * std::abs(want[i])) << what << " at " << i;
}

// The twin in storage T on the case's inputs rounded to T; out, lse and the gradients (accumulated into t.grad,
// or written over it) as fp32.
struct TwinResult {
  std::vector<float> out, lse, grad;
};

template <class T>
TwinResult run_twin(const Case& c, const Tensors& t, bool accumulate = true) {
  const attn::Geometry g = geometry_of(c, t);
  const auto in = to_storage<T>(t.in), dout = to_storage<T>(t.dout);
  auto grad = to_storage<T>(t.grad);
  std::vector<T> out(c.B * c.T * c.C);
  std::vector<float> lse(c.B * c.NH * c.T);
  const int32_t* mask = c.mask ? t.mask.data() : nullptr;
  const T *q = in.data(), *k = q + t.k_off, *v = q + t.v_off;
  twin::attention_forward(g, out.data(), lse.data(), q, k, v, mask);
  T* dq = grad.data();
  twin::attention_backward(g, dq, dq + t.k_off, dq + t.v_off, dout.data(), q, k, v, mask, out.data(), lse.data(),
                           accumulate);
  return {to_float(out), lse, to_float(grad)};
}

// The case's tensors with every gradient element set to `value` (0: to accumulate into; garbage: to write over).
Tensors with_grad(Tensors t, float value) {
  std::fill(t.grad.begin(), t.grad.end(), value);
  return t;
}

TEST(CudaAttentionTwin, Fp32MatchesCpuOp) {
  uint32_t seed = 1;
  for (const Case& c : kCases) {
    SCOPED_TRACE(::testing::Message() << "B " << c.B << " T " << c.T << " C " << c.C << " causal " << c.causal
                                      << " mask " << c.mask);
    const Tensors t = make_tensors(c, seed++);
    const Reference ref = cpu_reference(c, t);
    const TwinResult got = run_twin<float>(c, t);
    expect_close(got.out, ref.out, 1e-5f, 2e-6f, "out");
    expect_close(got.grad, ref.grad, 1e-5f, 2e-6f, "dq, dk, dv");
    const std::vector<double> lse = reference_lse(c, t);
    for (size_t i = 0; i < lse.size(); ++i) {
      if (std::isinf(lse[i])) {
        EXPECT_TRUE(std::isinf(got.lse[i]) && got.lse[i] < 0) << "lse at " << i;
        continue;
      }
      ASSERT_NEAR(got.lse[i], lse[i], 1e-5 * (1 + std::abs(lse[i]))) << "lse at " << i;
    }
  }
}

// A query that sees no key (causal + key 0 padded, case 3) gets out 0 and lse -inf, as the CPU op's
// all-zero probabilities; its gradients and its share in dk, dv are 0.
TEST(CudaAttentionTwin, QueryWithNoVisibleKey) {
  const Case c = kCases[2];
  Tensors t = make_tensors(c, 7);
  const TwinResult got = run_twin<float>(c, t);
  const int64_t hs = c.C / c.NH;
  for (int64_t h = 0; h < c.NH; ++h) {
    EXPECT_TRUE(std::isinf(got.lse[h * c.T]) && got.lse[h * c.T] < 0);
    for (int64_t ch = 0; ch < hs; ++ch) EXPECT_EQ(got.out[h * hs + ch], 0.0f);
  }
  for (int64_t ch = 0; ch < c.C; ++ch) EXPECT_EQ(got.grad[ch], t.grad[ch]) << "dq of query 0 changed";
}

// The twin in 16-bit storage against the CPU op on the same (rounded) inputs: within the storage's rounding
// of out and of the gradients (accumulated from 0, so one rounding each), as a fraction of the largest.
template <class T>
void expect_storage_within(float out_tol, float grad_tol) {
  uint32_t seed = 11;
  for (const Case& c : kCases) {
    SCOPED_TRACE(::testing::Message() << "B " << c.B << " T " << c.T << " C " << c.C);
    Tensors t = make_tensors(c, seed++);
    t.in = to_float(to_storage<T>(t.in));
    t.dout = to_float(to_storage<T>(t.dout));
    std::fill(t.grad.begin(), t.grad.end(), 0.0f);
    const Reference ref = cpu_reference(c, t);
    const TwinResult got = run_twin<T>(c, t);
    expect_close(got.out, ref.out, 2 * out_tol, out_tol, "out");
    expect_close(got.grad, ref.grad, 2 * grad_tol, grad_tol, "dq, dk, dv");
  }
}

TEST(CudaAttentionTwin, Bf16StorageWithinRounding) { expect_storage_within<Bf16>(1.0f / 256, 1.0f / 128); }
TEST(CudaAttentionTwin, Fp16StorageWithinRounding) { expect_storage_within<Fp16>(1.0f / 2048, 1.0f / 1024); }

// Told not to accumulate, the twin writes dq, dk, dv, every element of the views (0 for a masked key, a query that
// sees none): over NaN it gives what it adds into zeros (an element skipped keeps its NaN, one read spreads it).
TEST(CudaAttentionTwin, WritesEveryGradientWhenNotAccumulating) {
  uint32_t seed = 61;
  for (const Case& c : kCases) {
    SCOPED_TRACE(::testing::Message() << "B " << c.B << " T " << c.T << " C " << c.C << " causal " << c.causal
                                      << " mask " << c.mask << " KV " << c.KV);
    const Tensors t = make_tensors(c, seed++);
    const TwinResult written = run_twin<float>(c, with_grad(t, std::numeric_limits<float>::quiet_NaN()), false);
    const TwinResult added = run_twin<float>(c, with_grad(t, 0.0f), true);
    for (size_t i = 0; i < added.grad.size(); ++i) ASSERT_EQ(written.grad[i], added.grad[i]) << "dq, dk, dv at " << i;
  }
}

// ---- cuDNN's SDPA as described to it (attention_sdpa_desc.h), run by a naive attention: through the views'
// dims and strides, its padding mask as key counts, its backward writing (B,T,C) buffers that are then added
// into the gradient views; against the CPU op, for the masks cuDNN can express.
struct SdpaNaive {
  std::vector<float> out, stats, grad;
};

// The gradients of one (b, h, query i) row (kv: h's key/value head), into the buffers g[0..2] (dq (B,T,C)
// through w.out, dk and dv (B,T,KVC) through w.kv_grads).
void naive_row_backward(const sdpa::Views& w, const float* q, const float* k, const float* v, const float* dout,
                        const std::vector<double>& p, int64_t b, int64_t h, int64_t kv, int64_t i, int64_t hs,
                        double scale, std::vector<double>* g) {
  double d = 0;  // rowsum(dout * out) = sum_j p_j (dout . v_j)
  std::vector<double> dp(p.size());
  for (size_t j = 0; j < p.size(); ++j) {
    for (int64_t c = 0; c < hs; ++c) dp[j] += double{dout[offset(w.out, b, h, i, c)]} * v[offset(w.kv, b, kv, j, c)];
    d += p[j] * dp[j];
  }
  for (size_t j = 0; j < p.size(); ++j) {
    const double ds = p[j] * (dp[j] - d) * scale;
    for (int64_t c = 0; c < hs; ++c) {
      g[0][offset(w.out, b, h, i, c)] += ds * k[offset(w.kv, b, kv, j, c)];
      g[1][offset(w.kv_grads, b, kv, j, c)] += ds * q[offset(w.q, b, h, i, c)];
      g[2][offset(w.kv_grads, b, kv, j, c)] += p[j] * dout[offset(w.out, b, h, i, c)];
    }
  }
}

SdpaNaive naive_sdpa(const Case& c, const Tensors& t) {
  const sdpa::Views w = sdpa::views(c.B, c.T, c.C, c.NH, t.rs, c.KV, t.krs);
  const int64_t hs = c.C / c.NH, n = c.B * c.T * c.C, n_kv = c.B * c.T * c.kv_channels();
  const double scale = 1.0 / std::sqrt(double(hs));
  const float *q = t.in.data(), *k = q + t.k_off, *v = q + t.v_off;
  SdpaNaive r{std::vector<float>(n), std::vector<float>(c.B * c.NH * c.T), t.grad};
  std::vector<double> out(n), g[3] = {std::vector<double>(n), std::vector<double>(n_kv), std::vector<double>(n_kv)};
  for (int64_t b = 0; b < c.B; ++b) {
    const int64_t keys = c.mask ? sdpa::keys_before_padding(t.mask.data() + b * c.T, c.T) : c.T;
    for (int64_t h = 0; h < c.NH; ++h)
      for (int64_t i = 0; i < c.T; ++i) {
        const int64_t kv = h / (c.NH / c.kv_heads());
        const int64_t last = std::min(keys, c.causal ? i + 1 : c.T);
        std::vector<double> p(last);
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < last; ++j) {
          for (int64_t ch = 0; ch < hs; ++ch)
            p[j] += double{q[offset(w.q, b, h, i, ch)]} * k[offset(w.kv, b, kv, j, ch)];
          p[j] *= scale, m = std::max(m, p[j]);
        }
        for (double& x : p) sum += (x = std::exp(x - m));
        for (double& x : p) x /= sum;
        r.stats[offset(w.stats, b, h, i, 0)] = static_cast<float>(m + std::log(sum));
        for (int64_t j = 0; j < last; ++j)
          for (int64_t ch = 0; ch < hs; ++ch) out[offset(w.out, b, h, i, ch)] += p[j] * v[offset(w.kv, b, kv, j, ch)];
        naive_row_backward(w, q, k, v, t.dout.data(), p, b, h, kv, i, hs, scale, g);
      }
  }
  for (int64_t e = 0; e < n; ++e) {
    r.out[e] = static_cast<float>(out[e]);
    r.grad[sdpa::view_index(e, c.C, t.rs)] += static_cast<float>(g[0][e]);
  }
  for (int64_t e = 0; e < n_kv; ++e) {
    const int64_t d = sdpa::view_index(e, c.kv_channels(), t.krs);
    r.grad[t.k_off + d] += static_cast<float>(g[1][e]);
    r.grad[t.v_off + d] += static_cast<float>(g[2][e]);
  }
  return r;
}

TEST(CudaAttentionSdpaDescriptors, NaiveAttentionThroughThemMatchesCpuOp) {
  uint32_t seed = 41;
  for (const Case& c : kCases) {
    const bool row_without_keys = c.mask && c.B > 3;  // as in make_tensors: batch row 3 is all padding
    if (c.mask == 2 || row_without_keys) continue;    // not expressible as key counts
    SCOPED_TRACE(::testing::Message() << "B " << c.B << " T " << c.T << " C " << c.C);
    const Tensors t = make_tensors(c, seed++);
    const Reference ref = cpu_reference(c, t);
    const SdpaNaive got = naive_sdpa(c, t);
    expect_close(got.out, ref.out, 1e-5f, 2e-6f, "out");
    expect_close(got.grad, ref.grad, 1e-5f, 2e-6f, "dq, dk, dv");
    const std::vector<double> lse = reference_lse(c, t);
    for (size_t i = 0; i < lse.size(); ++i) ASSERT_NEAR(got.stats[i], lse[i], 1e-5 * (1 + std::abs(lse[i])));
  }
}

TEST(CudaAttentionSdpaDescriptors, KeyCountsStopAtTheFirstPadding) {
  const int32_t mask[] = {1, 1, 1, 0, 0, 1, 0};
  EXPECT_EQ(sdpa::keys_before_padding(mask, 7), 3);
  EXPECT_EQ(sdpa::keys_before_padding(mask, 2), 2);
  EXPECT_EQ(sdpa::keys_before_padding(mask + 3, 4), 0);
}

// The scratch parts are 256-byte aligned, in order, disjoint, and within the total; dk and dv sized for the
// key/value heads (grouped-query attention: fewer than q's).
TEST(CudaAttentionSdpaDescriptors, ScratchPartsAreAlignedAndDisjoint) {
  for (bool backward : {false, true})
    for (const auto [B, T, C, KVC, ws] : {std::array<int64_t, 5>{1, 1, 8, 8, 0},
                                          {3, 37, 96, 96, 1000},
                                          {16, 1024, 768, 768, 1 << 20},
                                          {2, 100, 512, 128, 77}}) {
      const sdpa::Scratch s = sdpa::scratch(B, T, C, KVC, 2, backward, static_cast<size_t>(ws));
      for (size_t part : {s.seq_q, s.seq_kv, s.dq, s.dk, s.dv, s.workspace}) EXPECT_EQ(part % 256, 0u);
      EXPECT_GE(s.seq_kv - s.seq_q, static_cast<size_t>(B) * 4);
      EXPECT_GE(s.dq - s.seq_kv, static_cast<size_t>(B) * 4);
      const size_t dq = backward ? sdpa::align256(static_cast<size_t>(B * T * C) * 2) : 0u;
      const size_t dkv = backward ? sdpa::align256(static_cast<size_t>(B * T * KVC) * 2) : 0u;
      EXPECT_EQ(s.dk - s.dq, dq);
      EXPECT_EQ(s.dv - s.dk, dkv);
      EXPECT_EQ(s.workspace - s.dv, dkv);
      EXPECT_GE(s.total, s.workspace + static_cast<size_t>(ws));
    }
}

#if defined(FERRY_WITH_CUDA)

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<Bf16>() { return DType::BF16; }
template <> constexpr DType dtype_of<Fp16>() { return DType::F16; }

// Device memory holding a copy of a host vector (RAII); get() reads it back.
template <class V>
struct Device {
  explicit Device(const std::vector<V>& host) : n(host.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(1, n * sizeof(V))), cudaSuccess);
    if (n) {
      EXPECT_EQ(cudaMemcpy(p, host.data(), n * sizeof(V), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device() { cudaFree(p); }
  std::vector<V> get() const {
    std::vector<V> h(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (n) {
      EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(V), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return h;
  }
  V* p = nullptr;
  size_t n;
};

using testing::expect_bitwise;

// One kernel's forward and backward on the device: out, lse, and the gradients accumulated into t.grad (or
// written over it).
template <class T>
struct DeviceRun {
  std::vector<T> out, grad;
  std::vector<float> lse;
};

template <class T>
DeviceRun<T> run_device(AttentionKernel kernel, const Case& c, const Tensors& t, bool accumulate = true) {
  const AttentionShape s{c.B, c.T, c.C, c.NH, t.rs, c.causal, c.KV, t.krs};
  const DType dt = dtype_of<T>();
  Device<T> in(to_storage<T>(t.in)), dout(to_storage<T>(t.dout)), grad(to_storage<T>(t.grad));
  Device<T> out(std::vector<T>(c.B * c.T * c.C));
  Device<float> lse(std::vector<float>(c.B * c.NH * c.T));
  Device<int32_t> mask(t.mask);
  const int32_t* m = c.mask ? mask.p : nullptr;
  const size_t fwd_bytes = attention_forward_scratch_bytes(kernel, s, dt);
  const size_t bwd_bytes = attention_backward_scratch_bytes(kernel, s, dt);
  // Scratch full of NaN (all bits set), as an earlier op may leave it: whatever part a kernel reads before writing
  // (cuDNN's dk/dv buffers where a padding mask lets it skip keys) shows up in the gradients.
  Device<char> scratch(std::vector<char>(std::max(fwd_bytes, bwd_bytes), static_cast<char>(0xff)));
  const T *q = in.p, *k = q + t.k_off, *v = q + t.v_off;
  EXPECT_EQ(attention_forward(kernel, out.p, lse.p, q, k, v, m, s, dt, scratch.p, fwd_bytes, nullptr), cudaSuccess);
  T* dq = grad.p;
  EXPECT_EQ(attention_backward(kernel, dq, dq + t.k_off, dq + t.v_off, dout.p, q, k, v, m, out.p, lse.p, s, accumulate,
                               dt, scratch.p, bwd_bytes, nullptr),
            cudaSuccess);
  return {out.get(), grad.get(), lse.get()};
}

template <class T>
class CudaAttentionKernels : public ::testing::Test {};
using StorageTypes = ::testing::Types<float, Bf16, Fp16>;
TYPED_TEST_SUITE(CudaAttentionKernels, StorageTypes);

TYPED_TEST(CudaAttentionKernels, FlashEqualsTwinBitwiseAndRunToRun) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  using T = TypeParam;
  uint32_t seed = 21;
  for (const Case& c : kCases) {
    SCOPED_TRACE(::testing::Message() << "B " << c.B << " T " << c.T << " C " << c.C);
    const Tensors t = make_tensors(c, seed++);
    const DeviceRun<T> a = run_device<T>(AttentionKernel::Flash, c, t);
    const DeviceRun<T> b = run_device<T>(AttentionKernel::Flash, c, t);
    expect_bitwise(b.out, a.out, "out, run to run");
    expect_bitwise(b.lse, a.lse, "lse, run to run");
    expect_bitwise(b.grad, a.grad, "grads, run to run");
    // The twin's results in T (to_float of T is exact, so comparing the T values is bitwise).
    const TwinResult want = run_twin<T>(c, t);
    expect_bitwise(to_float(a.out), want.out, "out");
    expect_bitwise(a.lse, want.lse, "lse");
    expect_bitwise(to_float(a.grad), want.grad, "dq, dk, dv");
    // Writing over garbage that differs (NaN on the device, 1e30 in the twin): equal only where both write.
    const DeviceRun<T> w =
        run_device<T>(AttentionKernel::Flash, c, with_grad(t, std::numeric_limits<float>::quiet_NaN()), false);
    expect_bitwise(to_float(w.grad), run_twin<T>(c, with_grad(t, 1e30f), false).grad, "dq, dk, dv written");
  }
}

TEST(CudaAttentionKernels, RefusesHeadSizesBeyond128) {
  const AttentionShape s{1, 8, 256, 1, 256, true};
  EXPECT_EQ(attention_forward(AttentionKernel::Flash, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, s, DType::F32,
                              nullptr, 0, nullptr),
            cudaErrorInvalidValue);
}

// Asking never throws or crashes, with or without cuDNN and a device; fp32 storage is never cuDNN's.
TEST(CudaAttentionKernels, CudnnAvailabilityIsSafeToAsk) {
  const AttentionShape s{2, 64, 128, 2, 384, true};
  EXPECT_FALSE(cudnn_sdpa_available(s, DType::F32));
  const bool bf16 = cudnn_sdpa_available(s, DType::BF16);
  EXPECT_TRUE(have_device() || !bf16) << "cuDNN needs a device";
  EXPECT_FALSE(cudnn_sdpa_available({2, 64, 1024, 4, 3072, true}, DType::BF16)) << "head size 256";
}

// cuDNN's SDPA (where it loads) against the flash twin within bf16 rounding: its own reduction order.
TEST(CudaAttentionKernels, CudnnSdpaWithinBf16OfTwin) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 31;
  int checked = 0;
  std::vector<std::string> declined;  // B, T, C of the shapes cuDNN would not take
  for (const Case& c : kCases) {
    SCOPED_TRACE(::testing::Message() << "B " << c.B << " T " << c.T << " C " << c.C);
    // cuDNN's padding mask is a key count per batch row: no holes (mask 2), no row without keys (batch
    // row b has T b/3 padding, so b = 3 has no key).
    const bool row_without_keys = c.mask && c.B > 3;
    if (c.mask == 2 || row_without_keys) continue;
    Tensors t = make_tensors(c, seed++);
    const AttentionShape s{c.B, c.T, c.C, c.NH, t.rs, c.causal, c.KV, t.krs};
    // cuDNN declines some shapes (B 1, T 1 on the 2026-11-28 H200): those fall back to the flash kernel in
    // training; the others must still be checked (skipping the test at the first left the later shapes,
    // grouped-query attention among them, unchecked).
    if (!cudnn_sdpa_available(s, DType::BF16)) {
      declined.push_back(::testing::PrintToString(std::vector<int64_t>{c.B, c.T, c.C}));
      continue;
    }
    ++checked;
    t.in = to_float(to_storage<Bf16>(t.in));
    t.dout = to_float(to_storage<Bf16>(t.dout));
    std::fill(t.grad.begin(), t.grad.end(), 0.0f);
    const Reference ref = cpu_reference(c, t);
    const DeviceRun<Bf16> got = run_device<Bf16>(AttentionKernel::CudnnSdpa, c, t);
    expect_close(to_float(got.out), ref.out, 1.0f / 64, 1.0f / 128, "out");
    expect_close(to_float(got.grad), ref.grad, 1.0f / 32, 1.0f / 64, "dq, dk, dv");
    // Told not to accumulate, its gradients are copied over NaN: what adding them into zeros gave (cuDNN's
    // deterministic algorithm: the same values run to run; compared as floats, 0 + -0 being +0).
    const DeviceRun<Bf16> written =
        run_device<Bf16>(AttentionKernel::CudnnSdpa, c, with_grad(t, std::numeric_limits<float>::quiet_NaN()), false);
    const std::vector<float> w = to_float(written.grad), a = to_float(got.grad);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(w[i], a[i]) << "dq, dk, dv written, at " << i;
    const TwinResult twin_bf16 = run_twin<Bf16>(c, t);
    for (size_t i = 0; i < got.lse.size(); ++i) {
      if (std::isinf(twin_bf16.lse[i])) continue;  // rows with no visible key: cuDNN's convention may differ
      ASSERT_NEAR(got.lse[i], twin_bf16.lse[i], 1e-2f * (1 + std::abs(twin_bf16.lse[i]))) << "lse at " << i;
    }
  }
  std::printf("cuDNN SDPA checked on %d shapes; declined (B, T, C): %s\n", checked,
              ::testing::PrintToString(declined).c_str());
  if (checked == 0) GTEST_SKIP() << "cuDNN SDPA not available here (declined every shape)";
}

// GPT-2 124M's attention (B 4, T 1024, 12 heads of 64, packed qkv, bf16): both kernels run, agree within
// bf16, and their times are printed (cudaEvent, mean of 5 forward + backward after one warm-up) for the
// first GPU session's notes.
TEST(CudaAttentionKernels, Gpt2ShapeRunsAndTimes) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const Case c{4, 1024, 768, 12, true, true, 0};
  const Tensors t = make_tensors(c, 51);
  const AttentionShape s{c.B, c.T, c.C, c.NH, t.rs, c.causal};
  std::vector<AttentionKernel> kernels = {AttentionKernel::Flash};
  if (cudnn_sdpa_available(s, DType::BF16)) kernels.push_back(AttentionKernel::CudnnSdpa);
  std::vector<std::vector<float>> outs;
  for (AttentionKernel kernel : kernels) {
    const DType dt = DType::BF16;
    Device<Bf16> in(to_storage<Bf16>(t.in)), dout(to_storage<Bf16>(t.dout)), grad(to_storage<Bf16>(t.grad));
    Device<Bf16> out(std::vector<Bf16>(c.B * c.T * c.C));
    Device<float> lse(std::vector<float>(c.B * c.NH * c.T));
    const size_t bytes = std::max(attention_forward_scratch_bytes(kernel, s, dt), attention_backward_scratch_bytes(kernel, s, dt));
    Device<char> scratch{std::vector<char>(bytes)};
    const Bf16 *q = in.p, *k = q + t.k_off, *v = q + t.v_off;
    Bf16* dq = grad.p;
    cudaEvent_t e[3];
    for (auto& x : e) ASSERT_EQ(cudaEventCreate(&x), cudaSuccess);
    float fwd_ms = 0, bwd_ms = 0;
    for (int it = 0; it < 6; ++it) {
      cudaEventRecord(e[0]);
      ASSERT_EQ(attention_forward(kernel, out.p, lse.p, q, k, v, nullptr, s, dt, scratch.p, bytes, nullptr), cudaSuccess);
      cudaEventRecord(e[1]);
      ASSERT_EQ(attention_backward(kernel, dq, dq + t.k_off, dq + t.v_off, dout.p, q, k, v, nullptr, out.p, lse.p, s,
                                   true, dt, scratch.p, bytes, nullptr),
                cudaSuccess);
      cudaEventRecord(e[2]);
      ASSERT_EQ(cudaEventSynchronize(e[2]), cudaSuccess);
      float f = 0, b = 0;
      cudaEventElapsedTime(&f, e[0], e[1]);
      cudaEventElapsedTime(&b, e[1], e[2]);
      if (it > 0) fwd_ms += f / 5, bwd_ms += b / 5;
    }
    for (auto& x : e) cudaEventDestroy(x);
    std::printf("attention %s, B 4 T 1024 C 768 NH 12 causal bf16: forward %.3f ms, backward %.3f ms\n",
                kernel == AttentionKernel::Flash ? "flash" : "cudnn-sdpa", fwd_ms, bwd_ms);
    outs.push_back(to_float(out.get()));
  }
  if (outs.size() == 2) expect_close(outs[1], outs[0], 1.0f / 64, 1.0f / 128, "cuDNN out vs flash out");
}

#endif  // FERRY_WITH_CUDA

}  // namespace
}  // namespace ferry::kernels::cuda
