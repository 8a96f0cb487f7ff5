// Multi-head self-attention, forward and backward: GPT-2's causal one on packed qkv (c_attn's output) and
// BERT's bidirectional one on separate q, k, v with a key padding mask; Llama's grouped-query one (fewer
// key/value heads than query heads).
// Per head, with q, k, v (T,hs) views and scale = 1/sqrt(hs):
//   forward:  S = q k^T * scale, masked;  P = softmax(S) (saved);  out = P v
//   backward: dP = dout v^T;  dv += P^T dout;  dS = P * (dP - rowsum(P * dP)) * scale;
//             dq += dS k;  dk += dS^T q      (or = for gradients this op produces first)
// The products are oneDNN batched matmuls over (batch, head) reading q, k, v in place through strides;
// the masked softmax and its backward are plain loops. The CUDA path will use a fused kernel.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/workspace.h"

namespace ferry::kernels::cpu {
namespace {

// Grouped-query attention's sizes: KV key/value heads, each read by G = NH/KV consecutive query heads.
struct Groups {
  int64_t KV, G, kv_row_stride;
};

Groups groups(const AttentionShape& s) {
  const int64_t KV = s.kv_heads ? s.kv_heads : s.NH;
  if (KV <= 0 || s.NH % KV != 0)
    throw std::invalid_argument("attention: " + std::to_string(s.NH) + " query heads do not split evenly over " +
                                std::to_string(KV) + " key/value heads; num_attention_heads must be a multiple of " +
                                "num_key_value_heads");
  return {KV, s.NH / KV, s.kv_row_stride ? s.kv_row_stride : s.row_stride};
}

// Strides of the views attention takes of its tensors, batched over (B, KV): matrix (b, g) is the one of
// query head g*G + j, for the group member j the caller offsets the query-side pointers by (j*hs in q and
// out, j*T*T in probs). With G = 1 that is every head at once.
struct Views {
  StridedBatch head_of_q;     // a head of q: (T,hs) rows row_stride apart, batches T*row_stride apart
  StridedBatch head_of_kv;    // a head of k or v: (T,hs) rows kv_row_stride apart
  StridedBatch head_of_kv_t;  // the same, transposed: (hs,T)
  StridedBatch head_of_out;   // (T,hs) inside out (B,T,C)
  StridedBatch probs;         // (T,T) inside probs (B,NH,T,T)
  StridedBatch probs_t;       // the same, transposed
};

Views views(const AttentionShape& s, const Groups& g) {
  const int64_t hs = s.C / s.NH, T = s.T, rs = s.row_stride, krs = g.kv_row_stride, G = g.G;
  return {{T * rs, G * hs, rs, 1},   {T * krs, hs, krs, 1},           {T * krs, hs, 1, krs},
          {T * s.C, G * hs, s.C, 1}, {s.NH * T * T, G * T * T, T, 1}, {s.NH * T * T, G * T * T, 1, T}};
}

}  // namespace

void attention_forward(float* out, float* att, const float* q, const float* k, const float* vv, const AttentionShape& s) {
  const int64_t B = s.B, T = s.T, NH = s.NH, hs = s.C / s.NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const Groups g = groups(s);
  const Views v = views(s, g);
  // S = q k^T (full T x T; the mask is applied in the softmax), one group member at a time
  for (int64_t j = 0; j < g.G; ++j)
    batched_matmul(att + j * T * T, v.probs, q + j * hs, v.head_of_q, k, v.head_of_kv_t, B, g.KV, T, T, hs, false);
  parallel_chunks(B * NH * T, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = r % T, b = r / (NH * T);
      const int64_t last = s.causal ? t : T - 1;  // keys 0..last may be visible
      const int32_t* mask = s.key_mask ? s.key_mask + b * T : nullptr;
      auto visible = [&](int64_t t2) { return !mask || mask[t2] != 0; };
      float* a = att + r * T;
      float maxv = -INFINITY;
      for (int64_t t2 = 0; t2 <= last; ++t2)
        if (visible(t2)) maxv = std::max(maxv, a[t2] * scale);
      float sum = 0;
      for (int64_t t2 = 0; t2 <= last; ++t2) {
        a[t2] = visible(t2) ? std::exp(a[t2] * scale - maxv) : 0.0f;
        sum += a[t2];
      }
      const float inv = sum > 0 ? 1.0f / sum : 0.0f;  // a query with no visible key attends to nothing
      for (int64_t t2 = 0; t2 <= last; ++t2) a[t2] *= inv;
      for (int64_t t2 = last + 1; t2 < T; ++t2) a[t2] = 0.0f;
    }
  });
  // out = P v
  for (int64_t j = 0; j < g.G; ++j)
    batched_matmul(out + j * hs, v.head_of_out, att + j * T * T, v.probs, vv, v.head_of_kv, B, g.KV, T, hs, T, false);
}

// A key/value head's gradients sum over the G query heads that read it: the members add one after the other,
// in order, so the sums are reproducible (the first one writes them when they are not accumulated into).
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* vv, const float* att, const AttentionShape& s, bool accumulate) {
  const int64_t B = s.B, T = s.T, NH = s.NH, hs = s.C / s.NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const Groups g = groups(s);
  const Views v = views(s, g);
  float* ds = workspace(Scratch::Op, B * NH * T * T * 4);
  // dP = dout v^T;  dv (+)= P^T dout
  for (int64_t j = 0; j < g.G; ++j) {
    batched_matmul(ds + j * T * T, v.probs, dout + j * hs, v.head_of_out, vv, v.head_of_kv_t, B, g.KV, T, T, hs, false);
    batched_matmul(dv, v.head_of_kv, att + j * T * T, v.probs_t, dout + j * hs, v.head_of_out, B, g.KV, T, hs, T,
                   accumulate || j > 0);
  }
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
  // dq (+)= dS k;  dk (+)= dS^T q
  for (int64_t j = 0; j < g.G; ++j) {
    batched_matmul(dq + j * hs, v.head_of_q, ds + j * T * T, v.probs, k, v.head_of_kv, B, g.KV, T, hs, T, accumulate);
    batched_matmul(dk, v.head_of_kv, ds + j * T * T, v.probs_t, q + j * hs, v.head_of_q, B, g.KV, T, hs, T,
                   accumulate || j > 0);
  }
}

void attention_decode(float* out, const float* q, const float* k, const float* v, int64_t len, int64_t NH, int64_t KV,
                      int64_t hs) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t G = NH / KV, kv_row = KV * hs;
  std::vector<float> p(static_cast<size_t>(len));
  for (int64_t h = 0; h < NH; ++h) {
    const float* qh = q + h * hs;
    const int64_t kv = (h / G) * hs;
    float maxv = -INFINITY;
    for (int64_t j = 0; j < len; ++j) {
      float s = 0;
      for (int64_t c = 0; c < hs; ++c) s += qh[c] * k[j * kv_row + kv + c];
      p[j] = s * scale;
      maxv = std::max(maxv, p[j]);
    }
    float sum = 0;
    for (int64_t j = 0; j < len; ++j) sum += p[j] = std::exp(p[j] - maxv);
    float* oh = out + h * hs;
    std::fill(oh, oh + hs, 0.0f);
    for (int64_t j = 0; j < len; ++j)
      for (int64_t c = 0; c < hs; ++c) oh[c] += p[j] / sum * v[j * kv_row + kv + c];
  }
}

void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH) {
  attention_forward(out, att, qkv, qkv + C, qkv + 2 * C, {B, T, C, NH, 3 * C, true, nullptr});
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B, int64_t T,
                        int64_t C, int64_t NH, bool accumulate) {
  attention_backward(dqkv, dqkv + C, dqkv + 2 * C, dout, qkv, qkv + C, qkv + 2 * C, att,
                     {B, T, C, NH, 3 * C, true, nullptr}, accumulate);
}

}  // namespace ferry::kernels::cpu
