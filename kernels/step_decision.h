// What an optimizer step decides from its gradients' statistics before any weight changes: the global
// norm, whether the step is skipped (an inf/nan gradient), and the one scale every gradient gets. One
// header that the host (cpu_optim's OptimizerStep) and the CUDA device (a one-thread kernel, so that
// neither its AdamW kernels nor the host wait inside a step) both build: they decide bitwise alike.
#pragma once

#include "foundation/precision.h"

namespace ferry::kernels {

struct GradStats {
  double sum_squares = 0;  // of the gradients as stored (before any scaling)
  bool finite = true;      // false when any gradient is inf or nan
};

struct StepReport {
  double grad_norm = 0;  // global L2 norm of the unscaled gradients (grads / loss_scale)
  bool skipped = false;  // an inf/nan gradient: nothing was changed
};

// A plain value, so that a decision made in one step can be kept (or saved) and applied in a later one, and
// written by a kernel into memory the host reads.
struct StepDecision {
  StepReport report;
  float grad_scale = 1.0f;  // clip coefficient / loss scale
};

// The scale that clips a global norm to max_norm, as torch.nn.utils.clip_grad_norm_ (max_norm / (norm +
// 1e-6), at most 1); 1 when max_norm <= 0.
FERRY_HD inline float clip_scale(double global_norm, float max_norm) {
  if (max_norm <= 0) return 1.0f;
  const double coef = max_norm / (global_norm + 1e-6);
  return coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

// The decision from the statistics of every gradient of the model, summed by the caller in a fixed order.
FERRY_HD inline StepDecision decide_step(double sum_squares, bool finite, float max_norm, float loss_scale = 1.0f) {
  StepDecision d;
  d.report.grad_norm = sqrt_d(sum_squares) / loss_scale;
  d.report.skipped = !finite;
  d.grad_scale = clip_scale(d.report.grad_norm, max_norm) / loss_scale;
  return d;
}

}  // namespace ferry::kernels
