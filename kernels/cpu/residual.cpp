// Residual add: the skip connections around attention and MLP, forward and backward.
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace ferry::kernels::cpu {

void residual_forward(float* out, const float* a, const float* b, int64_t N) {
  parallel_chunks(N, 1 << 15, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = a[i] + b[i];
  });
}

void residual_backward(float* da, float* db, const float* dout, int64_t N, bool accumulate) {
  parallel_chunks(N, 1 << 15, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      da[i] = accumulate ? da[i] + dout[i] : dout[i];
      db[i] = accumulate ? db[i] + dout[i] : dout[i];
    }
  });
}

}  // namespace ferry::kernels::cpu
