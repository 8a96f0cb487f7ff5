// The AdamW update of one element, as torch.optim.AdamW computes it (decoupled weight decay, bias
// correction), with the per-step coefficients: one header that the CPU optimizer (every ISA path follows
// it) and the device AdamW kernel both build, so that host and device update bitwise alike.
#pragma once

#include <cstdint>

#include "foundation/precision.h"

namespace ferry::kernels {

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

//   g <- g * grad_scale
//   m <- beta1 m + (1 - beta1) g
//   v <- beta2 v + (1 - beta2) g^2
//   p <- p (1 - lr wd) - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// Each sum is one fused multiply-add, so m, v and p stay within 2 ulp of exact arithmetic on the same fp32
// inputs. The vector paths do the same operations in the same order: all paths agree bitwise. One
// division per element (m / denom) is all the divider does: a second one (sqrt(v) / sqrt(bc2), as torch
// writes it) made the CPU kernel divider-bound with two threads on one core.
FERRY_HD inline void adamw_element(float& p, float& m, float& v, float g, const AdamWCoefficients& c) {
  g *= c.grad_scale;
  m = fma_f(c.beta1, m, c.one_minus_beta1 * g);
  v = fma_f(c.beta2, v, (c.one_minus_beta2 * g) * g);
  const float denom = fma_f(sqrt_f(v), c.inv_bc2_sqrt, c.eps);  // a multiply, not a divide: see above
  p = fma_f(-c.step_size, div_f(m, denom), p * c.decay);
}

}  // namespace ferry::kernels
