// Softmax cross-entropy over the vocabulary, fused: the probabilities are never stored, backward
// recomputes them from the logits in the same pass that writes dlogits.
#include <cmath>

#include "models/ops/ops.h"
#include "models/ops/parallel.h"

namespace ferry::models::ops {
namespace {

struct RowStats {
  float max;
  float sum;  // sum of exp(logit - max)
};

RowStats row_stats(const float* l, int64_t V) {
  float m = -INFINITY;
  for (int64_t v = 0; v < V; ++v) m = std::max(m, l[v]);
  float s = 0;
  for (int64_t v = 0; v < V; ++v) s += std::exp(l[v] - m);
  return {m, s};
}

}  // namespace

void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t N, int64_t V) {
  parallel_chunks(N, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* l = logits + r * V;
      const RowStats st = row_stats(l, V);
      losses[r] = std::log(st.sum) + st.max - l[targets[r]];
    }
  });
}

void cross_entropy_backward(float* dlogits, const float* logits, const int32_t* targets, float dloss, int64_t N,
                            int64_t V) {
  parallel_chunks(N, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* l = logits + r * V;
      const RowStats st = row_stats(l, V);
      const float inv = 1.0f / st.sum;
      float* d = dlogits + r * V;
      for (int64_t v = 0; v < V; ++v) d[v] += dloss * std::exp(l[v] - st.max) * inv;
      d[targets[r]] -= dloss;
    }
  });
}

}  // namespace ferry::models::ops
