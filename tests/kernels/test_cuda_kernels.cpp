// The CUDA kernels (kernels/cuda/ops.h) against their host twins (kernels/cuda/twins.h), bitwise, for fp32,
// bf16 and fp16 storage on random shapes; backward both accumulating and writing its activation gradients; the
// vector paths (16-byte packs: aligned shapes such as C = 768) and the scalar ones (odd shapes, and every pointer
// one element off 16-byte alignment). Skipped where no CUDA device is present.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "test_helpers.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cuda/ops.h"
#include "kernels/cuda/twins.h"

namespace ferry::kernels::cuda {
namespace {

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define FERRY_NEED_DEVICE() \
  if (!have_device()) GTEST_SKIP() << "no CUDA device"

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<Bf16>() { return DType::BF16; }
template <> constexpr DType dtype_of<Fp16>() { return DType::F16; }

// A device copy of a host vector; read back with get().
template <class V>
struct Device {
  explicit Device(const std::vector<V>& host) : n(host.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(1, n * sizeof(V))), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, host.data(), n * sizeof(V), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Device() { cudaFree(p); }
  std::vector<V> get() const {
    std::vector<V> h(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(V), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  V* p = nullptr;
  size_t n;
};

template <class T>
std::vector<T> random_storage(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<T> v(n);
  for (int64_t i = 0; i < n; ++i) store(v.data(), i, d(gen));
  return v;
}

using testing::expect_bitwise;

// Where a backward's activation gradient starts, on the device or the host: accumulating, the same nonzero values
// on both; writing (accumulate false), garbage that differs between them (NaN, 1e30), so an element the kernel
// skips, or reads, cannot match its twin's.
template <class T>
std::vector<T> grad_start(int64_t n, uint32_t seed, bool accumulate, bool on_device) {
  if (accumulate) return random_storage<T>(n, seed);
  std::vector<T> v(n);
  for (int64_t i = 0; i < n; ++i) store(v.data(), i, on_device ? std::numeric_limits<float>::quiet_NaN() : 1e30f);
  return v;
}

template <class T>
class CudaKernels : public ::testing::Test {};
using StorageTypes = ::testing::Types<float, Bf16, Fp16>;
TYPED_TEST_SUITE(CudaKernels, StorageTypes);

// A tensor on the host and the device, its n elements `offset` elements into both allocations (new's and
// cudaMalloc's, both 16-byte aligned): offset 1 puts the pointers off 16-byte alignment, so the kernel and its twin
// take the scalar path where offset 0 may take packs. The elements before the offset are zeros on both sides.
template <class T>
struct Both {
  Both(const std::vector<T>& host_values, const std::vector<T>& device_values, int offset)
      : host(shifted(host_values, offset)), dev(shifted(device_values, offset)), offset(offset) {}
  Both(const std::vector<T>& values, int offset) : Both(values, values, offset) {}
  static std::vector<T> shifted(const std::vector<T>& v, int offset) {
    std::vector<T> s(v.size() + offset);
    for (int i = 0; i < offset; ++i) store(s.data(), i, 0.0f);
    std::copy(v.begin(), v.end(), s.begin() + offset);
    return s;
  }
  T* h() { return host.data() + offset; }
  T* d() { return dev.p + offset; }
  std::vector<T> host;
  Device<T> dev;
  int offset;
};

// A backward's activation gradient on both sides: its start as grad_start gives it.
template <class T>
Both<T> grad_both(int64_t n, uint32_t seed, bool accumulate, int offset) {
  return Both<T>(grad_start<T>(n, seed, accumulate, false), grad_start<T>(n, seed, accumulate, true), offset);
}

template <class T>
void expect_equal(Both<T>& t, const char* what) {
  expect_bitwise(t.dev.get(), t.host, what);
}

struct Shape {
  int64_t N, C;
};
// Odd shapes (the scalar path), and multiples of every pack (768: 96 packs of 8 bf16, 192 of 4 fp32; 300: fp32's).
const Shape kShapes[] = {{1, 1}, {3, 7}, {5, 257}, {7, 769}, {130, 300}, {2, 5003}, {4, 768}};
// The shapes, and GPT-2's C off alignment.
struct Case {
  Shape shape;
  int offset;
};
const Case kCases[] = {{{1, 1}, 0},     {{3, 7}, 0},    {{5, 257}, 0}, {{7, 769}, 0},
                       {{130, 300}, 0}, {{2, 5003}, 0}, {{4, 768}, 0}, {{4, 768}, 1}};

template <class T>
void expect_layernorm_equals_twin(int64_t N, int64_t C, int offset) {
  SCOPED_TRACE(::testing::Message() << "N " << N << ", C " << C << ", offset " << offset);
  Both<T> x(random_storage<T>(N * C, 1, 2.0f), offset), w(random_storage<T>(C, 2), offset),
      b(random_storage<T>(C, 3), offset), out(std::vector<T>(N * C), offset);
  std::vector<float> mean(N), rstd(N);
  Device<float> dmean(mean), drstd(rstd);
  ASSERT_EQ(layernorm_forward(out.d(), dmean.p, drstd.p, x.d(), w.d(), b.d(), N, C, 1e-5f, dtype_of<T>(), nullptr),
            cudaSuccess);
  twin::layernorm_forward(out.h(), mean.data(), rstd.data(), x.h(), w.h(), b.h(), N, C, 1e-5f);
  expect_equal(out, "out");
  expect_bitwise(dmean.get(), mean, "mean");
  expect_bitwise(drstd.get(), rstd, "rstd");
  Both<T> g(random_storage<T>(N * C, 4), offset);
  for (bool accumulate : {true, false}) {
    Both<T> gx = grad_both<T>(N * C, 5, accumulate, offset), gw(random_storage<T>(C, 6), offset),
            gb(random_storage<T>(C, 7), offset);
    Device<float> scratch(std::vector<float>(layernorm_backward_scratch_floats(N, C)));
    ASSERT_EQ(layernorm_backward(gx.d(), gw.d(), gb.d(), g.d(), x.d(), w.d(), dmean.p, drstd.p, N, C, scratch.p,
                                 accumulate, dtype_of<T>(), nullptr),
              cudaSuccess);
    twin::layernorm_backward(gx.h(), gw.h(), gb.h(), g.h(), x.h(), w.h(), mean.data(), rstd.data(), N, C, accumulate);
    expect_equal(gx, accumulate ? "dx, accumulated" : "dx, written");
    expect_equal(gw, "dw");
    expect_equal(gb, "db");
  }
}

TYPED_TEST(CudaKernels, LayerNormEqualsTwin) {
  FERRY_NEED_DEVICE();
  for (const Case& c : kCases) expect_layernorm_equals_twin<TypeParam>(c.shape.N, c.shape.C, c.offset);
}

template <class T>
void expect_cross_entropy_equals_twin(int64_t N, int64_t V, int64_t stride, int offset) {
  SCOPED_TRACE(::testing::Message() << "N " << N << ", V " << V << ", stride " << stride << ", offset " << offset);
  Both<T> logits(random_storage<T>(N * stride, 8, 4.0f), offset);
  std::vector<int32_t> targets(N);
  for (int64_t r = 0; r < N; ++r) targets[r] = r % 4 == 3 ? -100 : static_cast<int32_t>((r * 7919) % V);
  std::vector<float> losses(N);
  Device<int32_t> dt(targets);
  Device<float> dloss(losses);
  ASSERT_EQ(cross_entropy_forward(dloss.p, logits.d(), dt.p, N, V, stride, dtype_of<T>(), nullptr), cudaSuccess);
  twin::cross_entropy_forward(losses.data(), logits.h(), targets.data(), N, V, stride);
  expect_bitwise(dloss.get(), losses, "loss");
  std::vector<T> written;
  for (bool accumulate : {true, false}) {
    Both<T> d = grad_both<T>(N * stride, 9, accumulate, offset);
    // each side's own losses (bitwise the same, above): the rows' log-sum-exp comes from them
    ASSERT_EQ(cross_entropy_backward(d.d(), logits.d(), dt.p, dloss.p, 0.125f, N, V, stride, accumulate, dtype_of<T>(),
                                     nullptr),
              cudaSuccess);
    twin::cross_entropy_backward(d.h(), logits.h(), targets.data(), losses.data(), 0.125f, N, V, stride, accumulate);
    expect_equal(d, accumulate ? "dlogits, accumulated" : "dlogits, written");
    if (!accumulate) written = d.host;
  }
  // In place over the logits, as a step runs it: every thread reads its row's target logit before any writes (the
  // kernel's barrier), so the gradient is the one written to its own buffer, bitwise, on both sides.
  Both<T> in_place(random_storage<T>(N * stride, 8, 4.0f), offset);
  ASSERT_EQ(cross_entropy_backward(in_place.d(), in_place.d(), dt.p, dloss.p, 0.125f, N, V, stride, false,
                                   dtype_of<T>(), nullptr),
            cudaSuccess);
  twin::cross_entropy_backward(in_place.h(), in_place.h(), targets.data(), losses.data(), 0.125f, N, V, stride, false);
  expect_equal(in_place, "dlogits, in place");
  expect_bitwise(in_place.host, written, "dlogits in place against written apart (the twin)");
}

// Dense rows, and rows of a padded vocabulary (stride > V: the columns past V are not the row's, and their
// gradients are left as they were, or written 0 with the ignored rows when not accumulating); a padded stride
// takes packs whatever V is, its last pack partial.
TYPED_TEST(CudaKernels, CrossEntropyEqualsTwin) {
  FERRY_NEED_DEVICE();
  for (const Case& c : kCases)
    for (const int64_t stride : {c.shape.C, (c.shape.C / 128 + 1) * 128})
      expect_cross_entropy_equals_twin<TypeParam>(c.shape.N, c.shape.C, stride, c.offset);
}

TYPED_TEST(CudaKernels, SumSquaresEqualsTwin) {
  FERRY_NEED_DEVICE();
  using T = TypeParam;
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{123457}, int64_t{3000001}}) {
    auto g = random_storage<T>(n, 10);
    if (n > 1000) store(g.data(), n / 2, std::numeric_limits<float>::infinity());
    Device<T> dg(g);
    Device<char> scratch(std::vector<char>(sum_squares_scratch_bytes(n)));
    Device<SquaresResult> out(std::vector<SquaresResult>(1));
    ASSERT_EQ(sum_squares(out.p, dg.p, n, scratch.p, dtype_of<T>(), nullptr), cudaSuccess);
    const SquaresState want = twin::sum_squares(g.data(), n);
    const SquaresResult got = out.get()[0];
    EXPECT_EQ(std::memcmp(&got.sum, &want.sum, 8), 0) << n;
    EXPECT_EQ(got.nonfinite, want.nonfinite) << n;
  }
}

template <class T>
void expect_embedding_equals_twin(int64_t C) {
  SCOPED_TRACE(::testing::Message() << "C " << C);
  const int64_t B = 3, Tn = 61, V = 1001;
  std::vector<int32_t> tokens(B * Tn);
  for (int64_t i = 0; i < B * Tn; ++i) tokens[i] = static_cast<int32_t>((i * i * 7 + 3) % 97 * 10 % V);  // repeats
  const auto wte = random_storage<T>(V * C, 11), wpe = random_storage<T>(Tn * C, 12), type = random_storage<T>(C, 13);
  std::vector<T> out(B * Tn * C);
  Device<int32_t> dtok(tokens);
  Device<T> dwte(wte), dwpe(wpe), dtype(type), dout(out);
  ASSERT_EQ(embedding_forward(dout.p, dtok.p, dwte.p, dwpe.p, dtype.p, B, Tn, C, dtype_of<T>(), nullptr), cudaSuccess);
  twin::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), type.data(), B, Tn, C);
  expect_bitwise(dout.get(), out, "embedding out");
  const auto grad = random_storage<T>(B * Tn * C, 14);
  auto gwte = random_storage<T>(V * C, 15), gwpe = random_storage<T>(Tn * C, 16), gtype = random_storage<T>(C, 17);
  Device<T> dgrad(grad), dgwte(gwte), dgwpe(gwpe), dgtype(gtype);
  Device<char> scratch(std::vector<char>(embedding_backward_scratch_bytes(B, Tn, C)));
  ASSERT_EQ(embedding_backward(dgwte.p, dgwpe.p, dgtype.p, dgrad.p, dtok.p, B, Tn, C, V, scratch.p, dtype_of<T>(), nullptr),
            cudaSuccess);
  twin::embedding_backward(gwte.data(), gwpe.data(), grad.data(), tokens.data(), B, Tn, C, gtype.data());
  expect_bitwise(dgwte.get(), gwte, "dwte");
  expect_bitwise(dgwpe.get(), gwpe, "dwpe");
  expect_bitwise(dgtype.get(), gtype, "dtype");
}

// C = 259 takes single elements, C = 256 packs (each within one row) in the forward.
TYPED_TEST(CudaKernels, EmbeddingEqualsTwin) {
  FERRY_NEED_DEVICE();
  for (const int64_t C : {259, 256}) expect_embedding_equals_twin<TypeParam>(C);
}

template <class T>
void expect_elementwise_equal_twins(int64_t n, int offset) {
  SCOPED_TRACE(::testing::Message() << "n " << n << ", offset " << offset);
  Both<T> x(random_storage<T>(n, 18, 3.0f), offset), y(random_storage<T>(n, 19), offset);
  for (bool exact : {false, true}) {
    Both<T> out(std::vector<T>(n), offset);
    ASSERT_EQ(gelu_forward(out.d(), x.d(), n, exact, dtype_of<T>(), nullptr), cudaSuccess);
    twin::gelu_forward(out.h(), x.h(), n, exact);
    expect_equal(out, "gelu");
    for (bool accumulate : {true, false}) {
      Both<T> g = grad_both<T>(n, 20, accumulate, offset);
      ASSERT_EQ(gelu_backward(g.d(), y.d(), x.d(), n, exact, accumulate, dtype_of<T>(), nullptr), cudaSuccess);
      twin::gelu_backward(g.h(), y.h(), x.h(), n, exact, accumulate);
      expect_equal(g, accumulate ? "gelu backward, accumulated" : "gelu backward, written");
    }
  }
  Both<T> sum(std::vector<T>(n), offset);
  ASSERT_EQ(residual_forward(sum.d(), x.d(), y.d(), n, dtype_of<T>(), nullptr), cudaSuccess);
  twin::residual_forward(sum.h(), x.h(), y.h(), n);
  expect_equal(sum, "residual");
  for (bool accumulate : {true, false}) {
    Both<T> a = grad_both<T>(n, 21, accumulate, offset), b = grad_both<T>(n, 22, accumulate, offset);
    ASSERT_EQ(residual_backward(a.d(), b.d(), x.d(), n, accumulate, dtype_of<T>(), nullptr), cudaSuccess);
    twin::residual_backward(a.h(), b.h(), x.h(), n, accumulate);
    expect_equal(a, accumulate ? "da, accumulated" : "da, written");
    expect_equal(b, accumulate ? "db, accumulated" : "db, written");
  }
}

// An odd n (single elements), a multiple of every pack (packs), and the same off alignment (single elements).
TYPED_TEST(CudaKernels, ElementwiseEqualTwins) {
  FERRY_NEED_DEVICE();
  expect_elementwise_equal_twins<TypeParam>(1000003, 0);
  expect_elementwise_equal_twins<TypeParam>(1 << 20, 0);
  expect_elementwise_equal_twins<TypeParam>(1 << 20, 1);
}

template <class T>
void expect_rmsnorm_equals_twin(int64_t N, int64_t C, int offset) {
  SCOPED_TRACE(::testing::Message() << "N " << N << ", C " << C << ", offset " << offset);
  Both<T> x(random_storage<T>(N * C, 30, 2.0f), offset), w(random_storage<T>(C, 31), offset),
      out(std::vector<T>(N * C), offset);
  std::vector<float> rstd(N);
  Device<float> drstd(rstd);
  ASSERT_EQ(rmsnorm_forward(out.d(), drstd.p, x.d(), w.d(), N, C, 1e-6f, dtype_of<T>(), nullptr), cudaSuccess);
  twin::rmsnorm_forward(out.h(), rstd.data(), x.h(), w.h(), N, C, 1e-6f);
  expect_equal(out, "out");
  expect_bitwise(drstd.get(), rstd, "rstd");
  Both<T> g(random_storage<T>(N * C, 32), offset);
  for (bool accumulate : {true, false}) {
    Both<T> gx = grad_both<T>(N * C, 33, accumulate, offset), gw(random_storage<T>(C, 34), offset);
    Device<float> scratch(std::vector<float>(rmsnorm_backward_scratch_floats(N, C)));
    ASSERT_EQ(rmsnorm_backward(gx.d(), gw.d(), g.d(), x.d(), w.d(), drstd.p, N, C, scratch.p, accumulate, dtype_of<T>(),
                               nullptr),
              cudaSuccess);
    twin::rmsnorm_backward(gx.h(), gw.h(), g.h(), x.h(), w.h(), rstd.data(), N, C, accumulate);
    expect_equal(gx, accumulate ? "dx, accumulated" : "dx, written");
    expect_equal(gw, "dw");
  }
}

TYPED_TEST(CudaKernels, RmsNormEqualsTwin) {
  FERRY_NEED_DEVICE();
  for (const Case& c : kCases) expect_rmsnorm_equals_twin<TypeParam>(c.shape.N, c.shape.C, c.offset);
}

// q inside a packed (B,T,(H+2KV)*hs) row, Llama 3's scaling, positions up to 4095: packs of pairs (hs/2 = 32), and
// single pairs at offset 1.
template <class T>
void expect_rope_equals_twin(int offset) {
  SCOPED_TRACE(::testing::Message() << "offset " << offset);
  const int64_t B = 2, Tn = 4096, H = 4, hs = 64, rs = (H + 4) * hs, n = B * Tn * rs;
  const RopeScaling scaling{500000.0f, 8.0f, 1.0f, 4.0f, 8192.0f};
  Both<T> x(random_storage<T>(n, 40), offset), r(random_storage<T>(n, 41), offset);
  ASSERT_EQ(rope_forward(r.d(), x.d(), B, Tn, H, hs, rs, scaling, dtype_of<T>(), nullptr), cudaSuccess);
  ASSERT_TRUE(twin::rope_forward(r.h(), x.h(), B, Tn, H, hs, rs, scaling));
  expect_equal(r, "rope");
  // Writing: the rows' elements past the heads (k and v's) keep the garbage, which differs between the two.
  for (bool accumulate : {true, false}) {
    Both<T> dx = grad_both<T>(n, 42, accumulate, offset);
    ASSERT_EQ(rope_backward(dx.d(), x.d(), B, Tn, H, hs, rs, scaling, accumulate, dtype_of<T>(), nullptr), cudaSuccess);
    ASSERT_TRUE(twin::rope_backward(dx.h(), x.h(), B, Tn, H, hs, rs, scaling, accumulate));
    const std::vector<T> got = dx.dev.get();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = i + offset;
      if (accumulate || i % rs < H * hs)
        ASSERT_EQ(std::memcmp(&got[k], &dx.host[k], sizeof(T)), 0)
            << (accumulate ? "accumulated" : "written") << " at " << i;
      else ASSERT_TRUE(std::isnan(load(got.data(), k))) << "rope backward wrote past the heads at " << i;
    }
  }
}

template <class T>
void expect_swiglu_equals_twin(int64_t n, int offset) {
  SCOPED_TRACE(::testing::Message() << "n " << n << ", offset " << offset);
  Both<T> gate(random_storage<T>(n, 35, 4.0f), offset), up(random_storage<T>(n, 36), offset),
      d(random_storage<T>(n, 37), offset), out(std::vector<T>(n), offset);
  ASSERT_EQ(swiglu_forward(out.d(), gate.d(), up.d(), n, dtype_of<T>(), nullptr), cudaSuccess);
  twin::swiglu_forward(out.h(), gate.h(), up.h(), n);
  expect_equal(out, "swiglu");
  for (bool accumulate : {true, false}) {
    Both<T> dgate = grad_both<T>(n, 38, accumulate, offset), dup = grad_both<T>(n, 39, accumulate, offset);
    ASSERT_EQ(swiglu_backward(dgate.d(), dup.d(), d.d(), gate.d(), up.d(), n, accumulate, dtype_of<T>(), nullptr),
              cudaSuccess);
    twin::swiglu_backward(dgate.h(), dup.h(), d.h(), gate.h(), up.h(), n, accumulate);
    expect_equal(dgate, accumulate ? "dgate, accumulated" : "dgate, written");
    expect_equal(dup, accumulate ? "dup, accumulated" : "dup, written");
  }
}

TYPED_TEST(CudaKernels, SwiGluAndRopeEqualTwins) {
  FERRY_NEED_DEVICE();
  using T = TypeParam;
  expect_swiglu_equals_twin<T>(1000003, 0);
  expect_swiglu_equals_twin<T>(1 << 20, 0);
  expect_swiglu_equals_twin<T>(1 << 20, 1);
  expect_rope_equals_twin<T>(0);
  expect_rope_equals_twin<T>(1);
}

// Device AdamW: master, m, v and the working copy equal the shared element applied on the host.
TYPED_TEST(CudaKernels, AdamWEqualsTwin) {
  FERRY_NEED_DEVICE();
  using G = TypeParam;
  const int64_t n = 300007;
  const kernels::AdamWCoefficients c{0.9f, 0.1f, 0.999f, 0.001f, 0.9999f, 0.0123f, 1.3f, 1e-8f, 0.7f, 0x1234567u};
  auto p = random_storage<float>(n, 23), m = random_storage<float>(n, 24), v = random_storage<float>(n, 25);
  for (float& x : v) x = x * x;
  const auto g = random_storage<G>(n, 26);
  for (bool stochastic : {false, true}) {
    Device<float> dp(p), dm(m), dv(v);
    Device<G> dg(g);
    Device<Bf16> dw{std::vector<Bf16>(n)};
    ASSERT_EQ(adamw(dp.p, dm.p, dv.p, dg.p, dtype_of<G>(), dw.p, DType::BF16, stochastic, n, c, nullptr), cudaSuccess);
    auto p2 = p, m2 = m, v2 = v;
    std::vector<Bf16> w(n);
    for (int64_t i = 0; i < n; ++i) {
      kernels::adamw_element(p2[i], m2[i], v2[i], load(g.data(), i), c);
      w[i].bits = stochastic ? float_to_bf16_stochastic(p2[i], random_bits(c.random_key, static_cast<uint32_t>(i)))
                             : float_to_bf16(p2[i]);
    }
    expect_bitwise(dp.get(), p2, "master");
    expect_bitwise(dm.get(), m2, "m");
    expect_bitwise(dv.get(), v2, "v");
    expect_bitwise(dw.get(), w, "weights");
  }
}

// Refusals come before any launch, so they hold without a device: int32 storage, too many rows, and an
// empty tensor is a no-op.
TEST(CudaLaunchFunctions, RefuseBadArgumentsBeforeLaunching) {
  float* none = nullptr;
  EXPECT_EQ(layernorm_forward(none, none, none, none, none, none, 4, 8, 1e-5f, DType::I32, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(layernorm_forward(none, none, none, none, none, none, int64_t{1} << 31, 8, 1e-5f, DType::F32, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(layernorm_backward(none, none, none, none, none, none, none, none, 65536 * kColumnChunkRows, 8, none, false,
                               DType::F32, nullptr),
            cudaErrorInvalidValue);  // more column chunks than grid.y takes
  EXPECT_EQ(cross_entropy_forward(none, none, nullptr, 4, 8, 8, DType::I32, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cross_entropy_backward(none, none, nullptr, nullptr, 1.0f, 0, 8, 8, false, DType::F32, nullptr),
            cudaSuccess);
  EXPECT_EQ(gelu_forward(none, none, 0, false, DType::BF16, nullptr), cudaSuccess);
  EXPECT_EQ(residual_forward(none, none, none, 5, DType::I32, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(embedding_backward(none, none, none, none, nullptr, 2, 3, 4, 10, none, DType::I32, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(sum_squares(nullptr, none, 10, none, DType::I32, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(rmsnorm_forward(none, none, none, none, 4, 8, 1e-5f, DType::I32, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(rope_forward(none, none, 1, 4, 2, 7, 14, RopeScaling{}, DType::F32, nullptr),
            cudaErrorInvalidValue);  // odd
  EXPECT_EQ(swiglu_forward(none, none, none, 5, DType::I32, nullptr), cudaErrorInvalidValue);
  float never_read = 0;  // a working copy in int32 is refused, so it is not touched
  EXPECT_EQ(adamw(none, none, none, none, DType::F32, &never_read, DType::I32, false, 10, kernels::AdamWCoefficients{},
                  nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace ferry::kernels::cuda
