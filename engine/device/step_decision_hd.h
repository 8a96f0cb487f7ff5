// cpu_optim::decide_step (cpu_optim/step_decision.h) operation for operation, for host and device: the CUDA
// device decides a step in a one-thread kernel from its buckets' statistics, so that neither the AdamW
// kernels nor the host wait for each other inside a step. The host tests hold it to decide_step bitwise.
#pragma once

#include <cstdint>

#include "foundation/precision.h"

namespace ferry::device {

// cpu_optim::StepDecision, field for field, as a kernel writes it (pinned mapped host memory).
struct DeviceDecision {
  double grad_norm;   // of the unscaled gradients
  float grad_scale;   // clip coefficient / loss scale
  uint32_t skipped;   // an inf/nan gradient: nothing changes
};

FERRY_HD inline double sqrt_d(double x) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}

// The decision from the statistics of every gradient, summed by the caller in bucket order.
FERRY_HD inline DeviceDecision decide_step_hd(double sum_squares, bool finite, float max_norm, float loss_scale) {
  DeviceDecision d{};
  d.grad_norm = sqrt_d(sum_squares) / loss_scale;
  d.skipped = finite ? 0u : 1u;
  float clip = 1.0f;  // cpu_optim::clip_scale
  if (max_norm > 0) {
    const double coef = max_norm / (d.grad_norm + 1e-6);
    clip = coef < 1.0 ? static_cast<float>(coef) : 1.0f;
  }
  d.grad_scale = clip / loss_scale;
  return d;
}

}  // namespace ferry::device
