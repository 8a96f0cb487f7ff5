// GELU, tanh approximation (GPT-2's "gelu_new"), forward and backward.
#include <cmath>

#include "models/ops/ops.h"
#include "models/ops/parallel.h"

namespace ferry::models::ops {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

void gelu_forward(float* out, const float* x, int64_t N) {
  parallel_chunks(N, 1 << 14, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float v = x[i];
      out[i] = 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v)));
    }
  });
}

void gelu_backward(float* dx, const float* dout, const float* x, int64_t N) {
  parallel_chunks(N, 1 << 14, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float v = x[i];
      const float th = std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
      const float sech2 = 1.0f - th * th;
      const float local = 0.5f * (1.0f + th) + 0.5f * v * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
      dx[i] += local * dout[i];
    }
  });
}

}  // namespace ferry::models::ops
