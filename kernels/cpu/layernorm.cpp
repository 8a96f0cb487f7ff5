// LayerNorm over the channel dim with fp32 statistics (eps 1e-5 for GPT-2, 1e-12 for BERT), forward and backward.
#include <cmath>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace ferry::kernels::cpu {

void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                       int64_t N, int64_t C, float eps) {
  parallel_chunks(N, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * C;
      float m = 0;
#pragma omp simd reduction(+ : m)
      for (int64_t c = 0; c < C; ++c) m += xr[c];
      m /= static_cast<float>(C);
      float var = 0;
#pragma omp simd reduction(+ : var)
      for (int64_t c = 0; c < C; ++c) var += (xr[c] - m) * (xr[c] - m);
      var /= static_cast<float>(C);
      const float s = 1.0f / std::sqrt(var + eps);
      float* o = out + r * C;
      for (int64_t c = 0; c < C; ++c) o[c] = (xr[c] - m) * s * w[c] + b[c];
      mean[r] = m;
      rstd[r] = s;
    }
  });
}

void layernorm_backward(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                        const float* mean, const float* rstd, int64_t N, int64_t C, bool accumulate) {
  // dx_i = rstd * (g_i - mean(g) - xhat_i * mean(g * xhat)), with g = dout * w and xhat the normalised input.
  parallel_chunks(N, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * C;
      const float* d = dout + r * C;
      const float m = mean[r], s = rstd[r];
      float g_mean = 0, gx_mean = 0;
#pragma omp simd reduction(+ : g_mean, gx_mean)
      for (int64_t c = 0; c < C; ++c) {
        const float g = d[c] * w[c];
        g_mean += g;
        gx_mean += g * (xr[c] - m) * s;
      }
      g_mean /= static_cast<float>(C);
      gx_mean /= static_cast<float>(C);
      float* dxr = dx + r * C;
      for (int64_t c = 0; c < C; ++c) {
        const float xhat = (xr[c] - m) * s;
        const float v = s * (d[c] * w[c] - g_mean - xhat * gx_mean);
        dxr[c] = accumulate ? dxr[c] + v : v;
      }
    }
  });
  // dw = sum_rows dout * xhat, db = sum_rows dout: split over channels so each sum runs in row order.
  // Either may be null (a frozen parameter).
  if (!dw && !db) return;
  parallel_chunks(C, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < N; ++r) {
      const float* xr = x + r * C;
      const float* d = dout + r * C;
      const float m = mean[r], s = rstd[r];
      if (dw)
        for (int64_t c = c0; c < c1; ++c) dw[c] += d[c] * (xr[c] - m) * s;
      if (db)
        for (int64_t c = c0; c < c1; ++c) db[c] += d[c];
    }
  });
}

}  // namespace ferry::kernels::cpu
