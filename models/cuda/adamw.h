// The AdamW update of one element for the device optimizer (buckets of the device tier), shared with its
// host twin: the same operations in the same order as cpu_optim/adamw_math.h, so that device and CPU AdamW
// agree bitwise (tested on random inputs against cpu_optim::detail::adamw_element).
#pragma once

#include <cstdint>

#include "foundation/precision.h"

namespace ferry::cuda {

// The per-step coefficients (field for field cpu_optim::detail::AdamWCoefficients; kept separate because
// that header is internal to cpu_optim and host-only).
struct AdamWCoefficients {
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float decay;         // 1 - lr * weight_decay
  float step_size;     // lr / (1 - beta1^t)
  float inv_bc2_sqrt;  // 1 / sqrt(1 - beta2^t)
  float eps;
  float grad_scale;    // clip coefficient / loss scale
  uint32_t random_key; // stochastic rounding: hash of (seed, step)
};

//   g <- g * grad_scale; m <- beta1 m + (1 - beta1) g; v <- beta2 v + (1 - beta2) g^2
//   p <- p (1 - lr wd) - step_size * m / (sqrt(v) inv_bc2_sqrt + eps), each sum one fma.
FERRY_HD inline void adamw_element(float& p, float& m, float& v, float g, const AdamWCoefficients& c) {
  g *= c.grad_scale;
  m = fma_f(c.beta1, m, c.one_minus_beta1 * g);
  v = fma_f(c.beta2, v, (c.one_minus_beta2 * g) * g);
  const float denom = fma_f(sqrt_f(v), c.inv_bc2_sqrt, c.eps);
  p = fma_f(-c.step_size, div_f(m, denom), p * c.decay);
}

}  // namespace ferry::cuda
