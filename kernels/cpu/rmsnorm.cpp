// RMSNorm over the channel dim with an fp32 rstd (Llama, Mistral, Qwen2), forward and backward: LayerNorm
// without the mean and the bias.
#include <cmath>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace ferry::kernels::cpu {

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int64_t N, int64_t C, float eps) {
  parallel_chunks(N, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * C;
      float ms = 0;
#pragma omp simd reduction(+ : ms)
      for (int64_t c = 0; c < C; ++c) ms += xr[c] * xr[c];
      ms /= static_cast<float>(C);
      const float s = 1.0f / std::sqrt(ms + eps);
      float* o = out + r * C;
      for (int64_t c = 0; c < C; ++c) o[c] = xr[c] * s * w[c];
      rstd[r] = s;
    }
  });
}

void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                      int64_t N, int64_t C, bool accumulate) {
  // dx_i = rstd * (g_i - xhat_i * mean(g * xhat)), with g = dout * w and xhat = x * rstd.
  parallel_chunks(N, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * C;
      const float* d = dout + r * C;
      const float s = rstd[r];
      float gx_mean = 0;
#pragma omp simd reduction(+ : gx_mean)
      for (int64_t c = 0; c < C; ++c) gx_mean += d[c] * w[c] * xr[c] * s;
      gx_mean /= static_cast<float>(C);
      float* dxr = dx + r * C;
      for (int64_t c = 0; c < C; ++c) {
        const float v = s * (d[c] * w[c] - xr[c] * s * gx_mean);
        dxr[c] = accumulate ? dxr[c] + v : v;
      }
    }
  });
  // dw = sum_rows dout * xhat: split over channels so each sum runs in row order. Null: a frozen weight.
  if (!dw) return;
  parallel_chunks(C, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < N; ++r) {
      const float* xr = x + r * C;
      const float* d = dout + r * C;
      const float s = rstd[r];
      for (int64_t c = c0; c < c1; ++c) dw[c] += d[c] * xr[c] * s;
    }
  });
}

}  // namespace ferry::kernels::cpu
