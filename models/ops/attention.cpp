// Causal multi-head self-attention on packed qkv (GPT-2's c_attn output), forward and backward.
// Per head, with q, k, v (T,hs) slices of qkv (B,T,3C) and scale = 1/sqrt(hs):
//   forward:  S = q k^T * scale, causal mask;  P = softmax(S) (saved);  out = P v
//   backward: dP = dout v^T;  dv += P^T dout;  dS = P * (dP - rowsum(P * dP)) * scale;
//             dq += dS k;  dk += dS^T q
// The products are oneDNN batched matmuls over (batch, head) reading q, k, v in place through strides;
// the masked softmax and its backward are plain loops. The CUDA path will use a fused kernel.
#include <cmath>
#include <vector>

#include "models/ops/matmul.h"
#include "models/ops/ops.h"
#include "models/ops/parallel.h"

namespace ferry::models::ops {
namespace {

// Strides of the views attention takes of its tensors.
struct Views {
  StridedBatch head_of_qkv;    // q, k or v (T,hs) inside qkv (B,T,3C); add 0, C or 2C to the pointer
  StridedBatch head_of_qkv_t;  // the same, transposed: (hs,T)
  StridedBatch head_of_out;    // (T,hs) inside out (B,T,C)
  StridedBatch probs;          // (T,T) inside probs (B,NH,T,T)
  StridedBatch probs_t;        // the same, transposed
};

Views views(int64_t T, int64_t C, int64_t NH) {
  const int64_t hs = C / NH;
  return {{T * 3 * C, hs, 3 * C, 1}, {T * 3 * C, hs, 1, 3 * C}, {T * C, hs, C, 1},
          {NH * T * T, T * T, T, 1}, {NH * T * T, T * T, 1, T}};
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH) {
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const Views v = views(T, C, NH);
  // S = q k^T (full T x T; the mask is applied in the softmax)
  batched_matmul(att, v.probs, qkv, v.head_of_qkv, qkv + C, v.head_of_qkv_t, B, NH, T, T, hs, false);
  parallel_chunks(B * NH * T, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = r % T;  // query position: keys 0..t are visible
      float* a = att + r * T;
      float maxv = -INFINITY;
      for (int64_t t2 = 0; t2 <= t; ++t2) maxv = std::max(maxv, a[t2] * scale);
      float sum = 0;
      for (int64_t t2 = 0; t2 <= t; ++t2) {
        a[t2] = std::exp(a[t2] * scale - maxv);
        sum += a[t2];
      }
      const float inv = 1.0f / sum;
      for (int64_t t2 = 0; t2 <= t; ++t2) a[t2] *= inv;
      for (int64_t t2 = t + 1; t2 < T; ++t2) a[t2] = 0.0f;
    }
  });
  // out = P v
  batched_matmul(out, v.head_of_out, att, v.probs, qkv + 2 * C, v.head_of_qkv, B, NH, T, hs, T, false);
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B,
                        int64_t T, int64_t C, int64_t NH) {
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const Views v = views(T, C, NH);
  thread_local std::vector<float> scratch;
  if (static_cast<int64_t>(scratch.size()) < B * NH * T * T) scratch.resize(B * NH * T * T);
  float* ds = scratch.data();
  // dP = dout v^T;  dv += P^T dout
  batched_matmul(ds, v.probs, dout, v.head_of_out, qkv + 2 * C, v.head_of_qkv_t, B, NH, T, T, hs, false);
  batched_matmul(dqkv + 2 * C, v.head_of_qkv, att, v.probs_t, dout, v.head_of_out, B, NH, T, hs, T, true);
  // Softmax backward, in place: dS = P * (dP - sum_j P_j dP_j) * scale (zero where masked, as P is)
  parallel_chunks(B * NH * T, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* p = att + r * T;
      float* d = ds + r * T;
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t t2 = 0; t2 < T; ++t2) dot += p[t2] * d[t2];
      for (int64_t t2 = 0; t2 < T; ++t2) d[t2] = p[t2] * (d[t2] - dot) * scale;
    }
  });
  // dq += dS k;  dk += dS^T q
  batched_matmul(dqkv, v.head_of_qkv, ds, v.probs, qkv + C, v.head_of_qkv, B, NH, T, hs, T, true);
  batched_matmul(dqkv + C, v.head_of_qkv, ds, v.probs_t, qkv, v.head_of_qkv, B, NH, T, hs, T, true);
}

}  // namespace ferry::models::ops
