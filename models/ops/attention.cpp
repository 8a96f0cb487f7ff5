// Causal multi-head self-attention on packed qkv (GPT-2's c_attn output), forward and backward.
// The CPU path keeps the (T,T) probabilities per head for backward; the CUDA path will use a fused kernel.
#include <cmath>
#include <vector>

#include "models/ops/ops.h"
#include "models/ops/parallel.h"

namespace ferry::models::ops {

void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH) {
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  parallel_chunks(B * NH, 1, [&](int64_t bh0, int64_t bh1) {
    for (int64_t bh = bh0; bh < bh1; ++bh) {
      const int64_t b = bh / NH, h = bh % NH;
      const float* base = qkv + b * T * 3 * C;
      for (int64_t t = 0; t < T; ++t) {
        const float* q = base + t * 3 * C + h * hs;
        float* a = att + (bh * T + t) * T;
        float maxv = -INFINITY;
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const float* k = base + t2 * 3 * C + C + h * hs;
          float s = 0;
#pragma omp simd reduction(+ : s)
          for (int64_t i = 0; i < hs; ++i) s += q[i] * k[i];
          a[t2] = s * scale;
          maxv = std::max(maxv, a[t2]);
        }
        float sum = 0;
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          a[t2] = std::exp(a[t2] - maxv);
          sum += a[t2];
        }
        const float inv = 1.0f / sum;
        for (int64_t t2 = 0; t2 < T; ++t2) a[t2] = t2 <= t ? a[t2] * inv : 0.0f;
        float* o = out + (b * T + t) * C + h * hs;
        for (int64_t i = 0; i < hs; ++i) o[i] = 0;
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const float* v = base + t2 * 3 * C + 2 * C + h * hs;
          for (int64_t i = 0; i < hs; ++i) o[i] += a[t2] * v[i];
        }
      }
    }
  });
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B,
                        int64_t T, int64_t C, int64_t NH) {
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  // One (batch, head) per task: its dq, dk, dv slices are written by that task alone.
  parallel_chunks(B * NH, 1, [&](int64_t bh0, int64_t bh1) {
    std::vector<float> datt(T);
    for (int64_t bh = bh0; bh < bh1; ++bh) {
      const int64_t b = bh / NH, h = bh % NH;
      const float* base = qkv + b * T * 3 * C;
      float* dbase = dqkv + b * T * 3 * C;
      for (int64_t t = 0; t < T; ++t) {
        const float* a = att + (bh * T + t) * T;
        const float* d = dout + (b * T + t) * C + h * hs;
        // out = sum_t2 a[t2] v[t2]  =>  datt[t2] = d . v[t2],  dv[t2] += a[t2] d
        float dot_sum = 0;
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const float* v = base + t2 * 3 * C + 2 * C + h * hs;
          float* dv = dbase + t2 * 3 * C + 2 * C + h * hs;
          float s = 0;
#pragma omp simd reduction(+ : s)
          for (int64_t i = 0; i < hs; ++i) {
            s += d[i] * v[i];
            dv[i] += a[t2] * d[i];
          }
          datt[t2] = s;
          dot_sum += a[t2] * s;
        }
        // softmax backward: dpre[t2] = a[t2] (datt[t2] - sum_j a[j] datt[j]); pre = scale q.k
        const float* q = base + t * 3 * C + h * hs;
        float* dq = dbase + t * 3 * C + h * hs;
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const float dpre = a[t2] * (datt[t2] - dot_sum) * scale;
          const float* k = base + t2 * 3 * C + C + h * hs;
          float* dk = dbase + t2 * 3 * C + C + h * hs;
          for (int64_t i = 0; i < hs; ++i) {
            dq[i] += dpre * k[i];
            dk[i] += dpre * q[i];
          }
        }
      }
    }
  });
}

}  // namespace ferry::models::ops
