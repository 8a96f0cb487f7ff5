// SwiGLU, Llama's MLP activation, forward and backward: out = silu(gate) * up, elementwise.
#include <cmath>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace ferry::kernels::cpu {
namespace {

// exp(-g) overflows to inf for g < -88: the sigmoid is then 0, as it should be.
float sigmoid(float g) { return 1.0f / (1.0f + std::exp(-g)); }

}  // namespace

void swiglu_forward(float* out, const float* gate, const float* up, int64_t N) {
  parallel_chunks(N, 1 << 15, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = gate[i] * sigmoid(gate[i]) * up[i];
  });
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t N,
                     bool accumulate) {
  parallel_chunks(N, 1 << 15, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float g = gate[i];
      const float sig = sigmoid(g);
      const float dg = dout[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
      const float du = dout[i] * g * sig;
      dgate[i] = accumulate ? dgate[i] + dg : dg;
      dup[i] = accumulate ? dup[i] + du : du;
    }
  });
}

}  // namespace ferry::kernels::cpu
