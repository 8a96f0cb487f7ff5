// AdamW update and the gradient norm, parallel with oneTBB over fixed-size tiles.
#include "cpu_optim/adamw.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace ferry::cpu_optim {
namespace {

constexpr size_t kTile = 1 << 14;  // 64 KiB of each stream: stays in L2 while the tile is updated

template <class Body>
void for_tiles(size_t n, Body&& body) {
  const size_t tiles = (n + kTile - 1) / kTile;
  tbb::parallel_for(tbb::blocked_range<size_t>(0, tiles, 1), [&](const tbb::blocked_range<size_t>& r) {
    for (size_t t = r.begin(); t != r.end(); ++t) body(t, t * kTile, std::min(n, (t + 1) * kTile));
  }, tbb::simple_partitioner());
}

}  // namespace

void adamw_step(std::span<float> param, std::span<const float> grad, std::span<float> m, std::span<float> v,
                const AdamWHyper& h, int64_t step, float grad_scale) {
  const size_t n = param.size();
  if (grad.size() != n || m.size() != n || v.size() != n)
    throw std::invalid_argument("adamw_step: param, grad, m and v must have the same length");
  if (step < 1) throw std::invalid_argument("adamw_step: step counts from 1");
  // torch.optim.AdamW: p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
  //                    p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
  const float bc1 = 1.0f - static_cast<float>(std::pow(static_cast<double>(h.beta1), static_cast<double>(step)));
  const float bc2 = 1.0f - static_cast<float>(std::pow(static_cast<double>(h.beta2), static_cast<double>(step)));
  const float step_size = h.lr / bc1;
  const float bc2_sqrt = std::sqrt(bc2);
  const float decay = 1.0f - h.lr * h.weight_decay;
  float* __restrict p = param.data();
  const float* __restrict g = grad.data();
  float* __restrict mm = m.data();
  float* __restrict vv = v.data();
  const float b1 = h.beta1, b2 = h.beta2, eps = h.eps;
  for_tiles(n, [=](size_t, size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) {
      const float gi = g[i] * grad_scale;
      const float mi = b1 * mm[i] + (1.0f - b1) * gi;
      const float vi = b2 * vv[i] + (1.0f - b2) * gi * gi;
      mm[i] = mi;
      vv[i] = vi;
      p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
    }
  });
}

double grad_sum_squares(std::span<const float> grad) {
  const size_t n = grad.size();
  std::vector<double> partial((n + kTile - 1) / kTile, 0.0);
  for_tiles(n, [&](size_t t, size_t i0, size_t i1) {
    const float* g = grad.data();
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (size_t i = i0; i < i1; ++i) s += static_cast<double>(g[i]) * g[i];
    partial[t] = s;
  });
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

float clip_scale(double global_norm, float max_norm) {
  if (max_norm <= 0) return 1.0f;
  const double coef = max_norm / (global_norm + 1e-6);
  return coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

}  // namespace ferry::cpu_optim
