// Linear layer (HF Conv1D [in,out] or nn.Linear [out,in] weights) as oneDNN matmuls, forward and backward.
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace ferry::kernels::cpu {

void linear_forward(float* out, const float* x, const float* W, const float* bias, int64_t N, int64_t IC,
                    int64_t OC, bool weight_out_in) {
  // out (N,OC) = x (N,IC) @ W as (IC,OC); a [OC,IC] weight is read transposed.
  matmul(out, x, W, bias, N, OC, IC, /*trans_a=*/false, /*trans_b=*/weight_out_in, /*accumulate=*/false);
}

void linear_backward(float* dx, float* dW, float* dbias, const float* dout, const float* x, const float* W, int64_t N,
                     int64_t IC, int64_t OC, bool weight_out_in, bool accumulate) {
  // dx (N,IC) (+)= dout (N,OC) @ W^T as (OC,IC)
  matmul(dx, dout, W, nullptr, N, IC, OC, false, /*trans_b=*/!weight_out_in, accumulate);
  if (!dW) {
    // a frozen weight: no gradient
  } else if (weight_out_in) {
    // dW (OC,IC) += dout^T (OC,N) @ x (N,IC)
    matmul(dW, dout, x, nullptr, OC, IC, N, /*trans_a=*/true, false, true);
  } else {
    // dW (IC,OC) += x^T (IC,N) @ dout (N,OC)
    matmul(dW, x, dout, nullptr, IC, OC, N, /*trans_a=*/true, false, true);
  }
  if (dbias) {
    parallel_chunks(OC, 256, [&](int64_t c0, int64_t c1) {
      for (int64_t r = 0; r < N; ++r) {
        const float* d = dout + r * OC;
        for (int64_t c = c0; c < c1; ++c) dbias[c] += d[c];
      }
    });
  }
}

}  // namespace ferry::kernels::cpu
