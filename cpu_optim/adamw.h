// AdamW on host memory with PyTorch's semantics (decoupled weight decay, bias correction), fp32 states.
// This is the plain, portable version; the cpu_optim issue replaces its inner loop with fused
// AVX-512/AVX2 kernels behind the same interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace ferry::cpu_optim {

struct AdamWHyper {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

// One step over n elements. `step` counts from 1 (bias correction). Each gradient is multiplied by
// grad_scale first (global-norm clipping, 1/loss_scale); m and v are the first and second moments.
void adamw_step(std::span<float> param, std::span<const float> grad, std::span<float> m, std::span<float> v,
                const AdamWHyper& hyper, int64_t step, float grad_scale = 1.0f);

// Sum of squares of the gradients, in double, with a fixed reduction order (bitwise reproducible).
double grad_sum_squares(std::span<const float> grad);

// The scale that clips the global norm to max_norm (torch.nn.utils.clip_grad_norm_): 1 when
// max_norm <= 0 or the norm is already below it.
float clip_scale(double global_norm, float max_norm);

}  // namespace ferry::cpu_optim
