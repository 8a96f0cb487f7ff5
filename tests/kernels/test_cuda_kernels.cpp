// The CUDA kernels (kernels/cuda/ops.h) against their host twins (kernels/cuda/twins.h), bitwise, for fp32,
// bf16 and fp16 storage on random shapes; backward both accumulating and writing its activation gradients.
// Skipped where no CUDA device is present.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "test_helpers.h"

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

struct Shape {
  int64_t N, C;
};
const Shape kShapes[] = {{1, 1}, {3, 7}, {5, 257}, {7, 769}, {130, 300}, {2, 5003}};

TYPED_TEST(CudaKernels, LayerNormEqualsTwin) {
  FERRY_NEED_DEVICE();
  using T = TypeParam;
  for (const auto [N, C] : kShapes) {
    const auto x = random_storage<T>(N * C, 1, 2.0f), w = random_storage<T>(C, 2), b = random_storage<T>(C, 3);
    std::vector<T> out(N * C);
    std::vector<float> mean(N), rstd(N);
    Device<T> dx_(x), dw_(w), db_(b), dout_(out);
    Device<float> dmean(mean), drstd(rstd);
    ASSERT_EQ(layernorm_forward(dout_.p, dmean.p, drstd.p, dx_.p, dw_.p, db_.p, N, C, 1e-5f, dtype_of<T>(), nullptr),
              cudaSuccess);
    twin::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
    expect_bitwise(dout_.get(), out, "out");
    expect_bitwise(dmean.get(), mean, "mean");
    expect_bitwise(drstd.get(), rstd, "rstd");
    const auto g = random_storage<T>(N * C, 4);
    for (bool accumulate : {true, false}) {
      auto gx = grad_start<T>(N * C, 5, accumulate, false), gw = random_storage<T>(C, 6), gb = random_storage<T>(C, 7);
      Device<T> dg(g), dgx(grad_start<T>(N * C, 5, accumulate, true)), dgw(gw), dgb(gb);
      Device<float> scratch(std::vector<float>(layernorm_backward_scratch_floats(N, C)));
      ASSERT_EQ(layernorm_backward(dgx.p, dgw.p, dgb.p, dg.p, dx_.p, dw_.p, dmean.p, drstd.p, N, C, scratch.p,
                                   accumulate, dtype_of<T>(), nullptr),
                cudaSuccess);
      twin::layernorm_backward(gx.data(), gw.data(), gb.data(), g.data(), x.data(), w.data(), mean.data(), rstd.data(),
                               N, C, accumulate);
      expect_bitwise(dgx.get(), gx, accumulate ? "dx, accumulated" : "dx, written");
      expect_bitwise(dgw.get(), gw, "dw");
      expect_bitwise(dgb.get(), gb, "db");
    }
  }
}

// Dense rows, and rows of a padded vocabulary (stride > V: the columns past V are not the row's, and their
// gradients are left as they were, or written 0 with the ignored rows when not accumulating).
TYPED_TEST(CudaKernels, CrossEntropyEqualsTwin) {
  FERRY_NEED_DEVICE();
  using T = TypeParam;
  for (const auto [N, V] : kShapes)
    for (const int64_t stride : {V, (V / 128 + 1) * 128}) {
      const auto logits = random_storage<T>(N * stride, 8, 4.0f);
      std::vector<int32_t> targets(N);
      for (int64_t r = 0; r < N; ++r) targets[r] = r % 4 == 3 ? -100 : static_cast<int32_t>((r * 7919) % V);
      std::vector<float> losses(N);
      Device<T> dl(logits);
      Device<int32_t> dt(targets);
      Device<float> dloss(losses);
      ASSERT_EQ(cross_entropy_forward(dloss.p, dl.p, dt.p, N, V, stride, dtype_of<T>(), nullptr), cudaSuccess);
      twin::cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, stride);
      expect_bitwise(dloss.get(), losses, "loss");
      for (bool accumulate : {true, false}) {
        auto d = grad_start<T>(N * stride, 9, accumulate, false);
        Device<T> dd(grad_start<T>(N * stride, 9, accumulate, true));
        ASSERT_EQ(cross_entropy_backward(dd.p, dl.p, dt.p, 0.125f, N, V, stride, accumulate, dtype_of<T>(), nullptr),
                  cudaSuccess);
        twin::cross_entropy_backward(d.data(), logits.data(), targets.data(), 0.125f, N, V, stride, accumulate);
        expect_bitwise(dd.get(), d, accumulate ? "dlogits, accumulated" : "dlogits, written");
      }
    }
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

TYPED_TEST(CudaKernels, EmbeddingEqualsTwin) {
  FERRY_NEED_DEVICE();
  using T = TypeParam;
  const int64_t B = 3, Tn = 61, C = 259, V = 1001;
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

TYPED_TEST(CudaKernels, ElementwiseEqualTwins) {
  FERRY_NEED_DEVICE();
  using T = TypeParam;
  const int64_t n = 1000003;
  const auto x = random_storage<T>(n, 18, 3.0f), y = random_storage<T>(n, 19);
  for (bool exact : {false, true}) {
    std::vector<T> out(n);
    Device<T> dx(x), dy(y), dout(out);
    ASSERT_EQ(gelu_forward(dout.p, dx.p, n, exact, dtype_of<T>(), nullptr), cudaSuccess);
    twin::gelu_forward(out.data(), x.data(), n, exact);
    expect_bitwise(dout.get(), out, "gelu");
    for (bool accumulate : {true, false}) {
      auto g = grad_start<T>(n, 20, accumulate, false);
      Device<T> dg(grad_start<T>(n, 20, accumulate, true));
      ASSERT_EQ(gelu_backward(dg.p, dy.p, dx.p, n, exact, accumulate, dtype_of<T>(), nullptr), cudaSuccess);
      twin::gelu_backward(g.data(), y.data(), x.data(), n, exact, accumulate);
      expect_bitwise(dg.get(), g, accumulate ? "gelu backward, accumulated" : "gelu backward, written");
    }
  }
  std::vector<T> sum(n);
  Device<T> dx(x), dy(y), dsum(sum);
  ASSERT_EQ(residual_forward(dsum.p, dx.p, dy.p, n, dtype_of<T>(), nullptr), cudaSuccess);
  twin::residual_forward(sum.data(), x.data(), y.data(), n);
  expect_bitwise(dsum.get(), sum, "residual");
  for (bool accumulate : {true, false}) {
    auto a = grad_start<T>(n, 21, accumulate, false), b = grad_start<T>(n, 22, accumulate, false);
    Device<T> da(grad_start<T>(n, 21, accumulate, true)), db(grad_start<T>(n, 22, accumulate, true));
    ASSERT_EQ(residual_backward(da.p, db.p, dx.p, n, accumulate, dtype_of<T>(), nullptr), cudaSuccess);
    twin::residual_backward(a.data(), b.data(), x.data(), n, accumulate);
    expect_bitwise(da.get(), a, accumulate ? "da, accumulated" : "da, written");
    expect_bitwise(db.get(), b, accumulate ? "db, accumulated" : "db, written");
  }
}

TYPED_TEST(CudaKernels, RmsNormEqualsTwin) {
  FERRY_NEED_DEVICE();
  using T = TypeParam;
  for (const auto [N, C] : kShapes) {
    const auto x = random_storage<T>(N * C, 30, 2.0f), w = random_storage<T>(C, 31);
    std::vector<T> out(N * C);
    std::vector<float> rstd(N);
    Device<T> dx_(x), dw_(w), dout_(out);
    Device<float> drstd(rstd);
    ASSERT_EQ(rmsnorm_forward(dout_.p, drstd.p, dx_.p, dw_.p, N, C, 1e-6f, dtype_of<T>(), nullptr), cudaSuccess);
    twin::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
    expect_bitwise(dout_.get(), out, "out");
    expect_bitwise(drstd.get(), rstd, "rstd");
    const auto g = random_storage<T>(N * C, 32);
    for (bool accumulate : {true, false}) {
      auto gx = grad_start<T>(N * C, 33, accumulate, false), gw = random_storage<T>(C, 34);
      Device<T> dg(g), dgx(grad_start<T>(N * C, 33, accumulate, true)), dgw(gw);
      Device<float> scratch(std::vector<float>(rmsnorm_backward_scratch_floats(N, C)));
      ASSERT_EQ(rmsnorm_backward(dgx.p, dgw.p, dg.p, dx_.p, dw_.p, drstd.p, N, C, scratch.p, accumulate, dtype_of<T>(),
                                 nullptr),
                cudaSuccess);
      twin::rmsnorm_backward(gx.data(), gw.data(), g.data(), x.data(), w.data(), rstd.data(), N, C, accumulate);
      expect_bitwise(dgx.get(), gx, accumulate ? "dx, accumulated" : "dx, written");
      expect_bitwise(dgw.get(), gw, "dw");
    }
  }
}

TYPED_TEST(CudaKernels, SwiGluAndRopeEqualTwins) {
  FERRY_NEED_DEVICE();
  using T = TypeParam;
  const int64_t n = 1000003;
  const auto gate = random_storage<T>(n, 35, 4.0f), up = random_storage<T>(n, 36), d = random_storage<T>(n, 37);
  std::vector<T> out(n);
  Device<T> dg_(gate), du_(up), dd_(d), dout_(out);
  ASSERT_EQ(swiglu_forward(dout_.p, dg_.p, du_.p, n, dtype_of<T>(), nullptr), cudaSuccess);
  twin::swiglu_forward(out.data(), gate.data(), up.data(), n);
  expect_bitwise(dout_.get(), out, "swiglu");
  for (bool accumulate : {true, false}) {
    auto dgate = grad_start<T>(n, 38, accumulate, false), dup = grad_start<T>(n, 39, accumulate, false);
    Device<T> ddgate(grad_start<T>(n, 38, accumulate, true)), ddup(grad_start<T>(n, 39, accumulate, true));
    ASSERT_EQ(swiglu_backward(ddgate.p, ddup.p, dd_.p, dg_.p, du_.p, n, accumulate, dtype_of<T>(), nullptr),
              cudaSuccess);
    twin::swiglu_backward(dgate.data(), dup.data(), d.data(), gate.data(), up.data(), n, accumulate);
    expect_bitwise(ddgate.get(), dgate, accumulate ? "dgate, accumulated" : "dgate, written");
    expect_bitwise(ddup.get(), dup, accumulate ? "dup, accumulated" : "dup, written");
  }
  // q inside a packed (B,T,(H+2KV)*hs) row, Llama 3's scaling, positions up to 4095.
  const int64_t B = 2, Tn = 4096, H = 4, hs = 64, rs = (H + 4) * hs;
  const RopeScaling scaling{500000.0f, 8.0f, 1.0f, 4.0f, 8192.0f};
  const auto x = random_storage<T>(B * Tn * rs, 40);
  std::vector<T> r = random_storage<T>(B * Tn * rs, 41);
  Device<T> dx_(x), dr(r);
  ASSERT_EQ(rope_forward(dr.p, dx_.p, B, Tn, H, hs, rs, scaling, dtype_of<T>(), nullptr), cudaSuccess);
  ASSERT_TRUE(twin::rope_forward(r.data(), x.data(), B, Tn, H, hs, rs, scaling));
  expect_bitwise(dr.get(), r, "rope");
  // Writing: the rows' elements past the heads (k and v's) keep the garbage, which differs between the two.
  for (bool accumulate : {true, false}) {
    auto dx = grad_start<T>(B * Tn * rs, 42, accumulate, false);
    Device<T> ddx(grad_start<T>(B * Tn * rs, 42, accumulate, true));
    ASSERT_EQ(rope_backward(ddx.p, dx_.p, B, Tn, H, hs, rs, scaling, accumulate, dtype_of<T>(), nullptr), cudaSuccess);
    ASSERT_TRUE(twin::rope_backward(dx.data(), x.data(), B, Tn, H, hs, rs, scaling, accumulate));
    const std::vector<T> got = ddx.get();
    for (int64_t i = 0; i < B * Tn * rs; ++i) {
      if (accumulate || i % rs < H * hs)
        ASSERT_EQ(std::memcmp(&got[i], &dx[i], sizeof(T)), 0)
            << (accumulate ? "accumulated" : "written") << " at " << i;
      else ASSERT_TRUE(std::isnan(load(got.data(), i))) << "rope backward wrote past the heads at " << i;
    }
  }
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
  EXPECT_EQ(cross_entropy_backward(none, none, nullptr, 1.0f, 0, 8, 8, false, DType::F32, nullptr), cudaSuccess);
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
