// Backward's two ways of producing an activation gradient on the CPU (kernels/op_kernels.h's `accumulate`):
// written into a buffer of garbage it must equal accumulated onto zeros, every element (a NaN left behind is
// an element not written), and accumulated onto values it must add to them. Through CpuKernels, every kind.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "foundation/rng.h"
#include "kernels/cpu/cpu_kernels.h"

namespace ferry::kernels::cpu {
namespace {

using Buffers = std::vector<std::vector<float>>;

Operand op(std::vector<float>& v) { return {reinterpret_cast<std::byte*>(v.data()), DType::F32}; }
Operand op(std::vector<int32_t>& v) { return {reinterpret_cast<std::byte*>(v.data()), DType::I32}; }

struct Inputs {
  Rng rng{2026};
  std::vector<float> randn(int64_t n, float scale = 1.0f) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = static_cast<float>(rng.normal()) * scale;
    return v;
  }
};

// `backward(outs, accumulate)` writes the op's activation gradients into `outs` (of `sizes` elements).
// Written onto NaN must equal added onto zeros (== : a -0 written where +0 + -0 gives +0 counts as equal);
// added onto `base` must give base + written, within `tolerance` (a matmul may add in another order).
void expect_written_equals_accumulated(const std::string& what, const std::vector<int64_t>& sizes,
                                       const std::function<void(Buffers&, bool)>& backward, float tolerance = 0.0f) {
  Buffers zeros, written, onto;
  Inputs in;
  for (int64_t n : sizes) {
    zeros.emplace_back(static_cast<size_t>(n), 0.0f);
    written.emplace_back(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN());
    onto.push_back(in.randn(n));
  }
  const Buffers base = onto;
  backward(zeros, true);
  backward(written, false);
  backward(onto, true);
  for (size_t k = 0; k < sizes.size(); ++k) {
    int wrong = 0, not_added = 0;
    for (size_t i = 0; i < written[k].size(); ++i) {
      wrong += !(written[k][i] == zeros[k][i]);
      const float sum = base[k][i] + written[k][i];
      not_added += !(std::abs(onto[k][i] - sum) <= tolerance * (1.0f + std::abs(sum)));
    }
    EXPECT_EQ(wrong, 0) << what << " output " << k << ": elements written differ from accumulated onto zeros";
    EXPECT_EQ(not_added, 0) << what << " output " << k << ": accumulating did not add onto what was there";
  }
}

TEST(WrittenGradients, ElementwiseKindsWriteEveryElement) {
  CpuKernels k;
  Inputs in;
  const int64_t n = 3000;  // more than one thread's chunk in none: the tail of a vector loop
  std::vector<float> x = in.randn(n), y = in.randn(n), dout = in.randn(n);
  for (bool exact : {false, true})
    expect_written_equals_accumulated(exact ? "gelu (erf)" : "gelu (tanh)", {n}, [&](Buffers& o, bool acc) {
      k.gelu_backward({op(o[0]), op(dout), op(x), n, exact, acc});
    });
  expect_written_equals_accumulated("swiglu", {n, n}, [&](Buffers& o, bool acc) {
    k.swiglu_backward({op(o[0]), op(o[1]), op(dout), op(x), op(y), n, acc});
  });
  expect_written_equals_accumulated("residual", {n, n}, [&](Buffers& o, bool acc) {
    k.residual_backward({op(o[0]), op(o[1]), op(dout), n, acc});
  });
  const RopeDims rope{2, 5, 3, 8, 24, {}};
  std::vector<float> dq = in.randn(2 * 5 * 24);
  expect_written_equals_accumulated("rope", {2 * 5 * 24}, [&](Buffers& o, bool acc) {
    k.rope_backward({op(o[0]), op(dq), rope, acc});
  });
}

TEST(WrittenGradients, NormsAndLinearWriteEveryElement) {
  CpuKernels k;
  Inputs in;
  const int64_t N = 7, C = 40, OC = 24;
  std::vector<float> x = in.randn(N * C), dout = in.randn(N * C), w = in.randn(C), b = in.randn(C);
  std::vector<float> out(N * C), mean(N), rstd(N), dw(C), db(C);
  k.layernorm_forward({op(out), op(mean), op(rstd), op(x), op(w), op(b), N, C, 1e-5f});
  expect_written_equals_accumulated("layernorm", {N * C}, [&](Buffers& o, bool acc) {
    k.layernorm_backward({op(o[0]), op(dw), op(db), op(dout), op(x), op(w), op(mean), op(rstd), N, C, acc});
  });
  k.rmsnorm_forward({op(out), op(rstd), op(x), op(w), N, C, 1e-6f});
  expect_written_equals_accumulated("rmsnorm", {N * C}, [&](Buffers& o, bool acc) {
    k.rmsnorm_backward({op(o[0]), Operand{}, op(dout), op(x), op(w), op(rstd), N, C, acc});
  });
  std::vector<float> W = in.randn(C * OC), dy = in.randn(N * OC), dW(C * OC);
  for (bool out_in : {false, true})
    expect_written_equals_accumulated(out_in ? "linear [out,in]" : "linear [in,out]", {N * C},
                                      [&](Buffers& o, bool acc) {
                                        k.linear_backward({op(o[0]), op(dW), Operand{}, op(dy), op(x), op(W), N, C, OC,
                                                           out_in, acc});
                                      },
                                      1e-5f);
}

// Grouped-query attention: a key/value head's gradient sums over its query heads, so written means the first
// member writes and the others add; BERT's key mask leaves masked keys' gradients at zero.
TEST(WrittenGradients, AttentionWritesEveryElementOfQKAndV) {
  CpuKernels k;
  Inputs in;
  const int64_t B = 2, T = 6, NH = 4, hs = 4, C = NH * hs;
  for (const int64_t kv_heads : {int64_t{0}, int64_t{2}}) {
    for (const bool masked : {false, true}) {
      const int64_t kvc = kv_heads ? kv_heads * hs : C;
      std::vector<float> q = in.randn(B * T * C), key = in.randn(B * T * kvc), v = in.randn(B * T * kvc);
      std::vector<float> out(B * T * C), probs(B * NH * T * T), dout = in.randn(B * T * C);
      std::vector<int32_t> mask(B * T, 1);
      mask[3] = mask[T + 5] = 0;
      const Operand key_mask = masked ? op(mask) : Operand{};
      const AttentionDims dims{B, T, C, NH, C, !masked, kv_heads, kv_heads ? kvc : 0};
      k.attention_forward({op(out), op(probs), op(q), op(key), op(v), key_mask, dims});
      const std::string what = std::string("attention") + (kv_heads ? ", grouped" : "") + (masked ? ", key mask" : "");
      expect_written_equals_accumulated(what, {B * T * C, B * T * kvc, B * T * kvc},
                                        [&](Buffers& o, bool acc) {
                                          k.attention_backward({op(o[0]), op(o[1]), op(o[2]), op(dout), op(q), op(key),
                                                                op(v), key_mask, op(probs), op(out), dims, acc});
                                        },
                                        1e-5f);
    }
  }
}

// The padded vocabulary's columns and the rows without a target get zeros; no target at all: zeros throughout.
TEST(WrittenGradients, CrossEntropyWritesThePaddedColumnsAndUntargetedRowsAsZeros) {
  CpuKernels k;
  Inputs in;
  const int64_t N = 5, V = 11, stride = 16;
  std::vector<float> logits = in.randn(N * stride);
  std::vector<int32_t> targets{3, -100, 10, 0, -100}, none(N, -100);
  for (auto* t : {&targets, &none})
    expect_written_equals_accumulated(
        t == &none ? "cross-entropy, no target" : "cross-entropy", {N * stride},
        [&](Buffers& o, bool acc) {
          k.cross_entropy_backward({op(o[0]), op(logits), op(*t), {}, N, V, stride, 0.5f, acc});  // CPU: no losses read
        },
        1e-6f);  // the target's -dloss comes after the sum
}

}  // namespace
}  // namespace ferry::kernels::cpu
