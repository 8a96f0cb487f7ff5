// The per-thread bodies of the row and reduction kernels, shared by the kernels (kernels/cuda/*.cu) and their
// host twins (twins.h): a kernel differs from its twin only in how the block's states meet (shuffles vs the
// replay of reduce.h). T is the storage type (float, Bf16, Fp16); all math is fp32 (double for the
// gradients' sum of squares, as cpu_optim sums it).
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/math.h"
#include "kernels/cuda/pack.h"
#include "foundation/precision.h"

namespace ferry::kernels::cuda {

// A pair of fp32 sums (LayerNorm backward: sum of g, sum of g * xhat).
struct SumPair {
  float a, b;
};
FERRY_HD inline SumPair sum_pair_merge(SumPair x, SumPair y) { return {x.a + y.a, x.b + y.b}; }

// Sum of squares and a non-finite flag (inf or NaN among the elements).
struct SquaresState {
  double sum;
  uint32_t nonfinite, pad;
};
FERRY_HD inline SquaresState squares_merge(SquaresState x, SquaresState y) {
  return {x.sum + y.sum, x.nonfinite | y.nonfinite, 0};
}

// Calls f(c, i, lanes) for each pack of thread t in row r, in order: its first column, first element, and how
// many of its W lanes lie in the row. The lanes of a pack are then taken in order 0..lanes-1, so a thread's
// fold visits its columns in increasing order whatever W is (the order, and so the bits, differ between W).
template <class F>
FERRY_HD void for_each_row_pack(const RowMap& m, int64_t r, int t, F&& f) {
  for (int64_t k = 0; k < m.per_thread; ++k) {
    const int64_t c = row_col(m, t, k);
    if (c >= m.cols) return;
    f(c, r * m.stride + c, pack_lanes(m, c));
  }
}

// ---- LayerNorm forward, row r: x, out (N,C) T; w, b (C) T; mean, rstd (N) fp32. W: the map's pack width.
template <int W, class T>
FERRY_HD Moments ln_forward_fold(const RowMap& m, const T* x, int64_t r, int t) {
  Moments s{0.0f, 0.0f, 0.0f};
  for_each_row_pack(m, r, t, [&](int64_t, int64_t i, int lanes) {
    float v[W];
    load_pack<W>(x, i, v);
    for (int j = 0; j < W; ++j)
      if (j < lanes) s = moments_push(s, v[j]);
  });
  return s;
}

template <int W, class T>
FERRY_HD void ln_forward_write(const RowMap& m, T* out, float* mean, float* rstd, const T* x, const T* w, const T* b,
                               int64_t r, int t, Moments s, float eps) {
  float mu, rs;
  moments_stats(s, eps, &mu, &rs);
  for_each_row_pack(m, r, t, [&](int64_t c, int64_t i, int lanes) {
    float v[W], wv[W], bv[W];
    load_pack<W>(x, i, v);
    load_pack<W>(w, c, wv);
    load_pack<W>(b, c, bv);
    for (int j = 0; j < W; ++j) v[j] = fma_f((v[j] - mu) * rs, wv[j], bv[j]);
    store_pack<W>(out, i, v, lanes);
  });
  if (t == 0) mean[r] = mu, rstd[r] = rs;
}

// ---- LayerNorm backward, row part: dx (N,C) += (or =, not accumulating) rstd (g - mean(g) - xhat mean(g xhat)),
// g = dout * w.
template <int W, class T>
FERRY_HD SumPair ln_backward_fold(const RowMap& m, const T* dout, const T* x, const T* w, float mu, float rs, int64_t r,
                                  int t) {
  SumPair s{0.0f, 0.0f};
  for_each_row_pack(m, r, t, [&](int64_t c, int64_t i, int lanes) {
    float d[W], v[W], wv[W];
    load_pack<W>(dout, i, d);
    load_pack<W>(x, i, v);
    load_pack<W>(w, c, wv);
    for (int j = 0; j < W; ++j) {
      if (j >= lanes) break;
      const float g = d[j] * wv[j], xhat = (v[j] - mu) * rs;
      s = {s.a + g, s.b + g * xhat};
    }
  });
  return s;
}

template <int W, class T>
FERRY_HD void ln_backward_write(const RowMap& m, T* dx, const T* dout, const T* x, const T* w, float mu, float rs,
                                int64_t r, int t, SumPair sums, bool accumulate) {
  const auto C = static_cast<float>(m.cols);
  const float g_mean = div_f(sums.a, C), gx_mean = div_f(sums.b, C);
  for_each_row_pack(m, r, t, [&](int64_t c, int64_t i, int lanes) {
    float d[W], v[W], wv[W];
    load_pack<W>(dout, i, d);
    load_pack<W>(x, i, v);
    load_pack<W>(w, c, wv);
    for (int j = 0; j < W; ++j) {
      const float xhat = (v[j] - mu) * rs;
      v[j] = rs * (d[j] * wv[j] - g_mean - xhat * gx_mean);
    }
    store_grad_pack<W>(dx, i, v, accumulate, lanes);
  });
}

// ---- RMSNorm forward, row r: the sum of squares of the thread's elements; then out = x * rstd * w,
// rstd = 1/sqrt(sum / C + eps) (the CPU op's expressions). x, out (N,C) T; w (C) T; rstd (N) fp32.
FERRY_HD inline float sum_merge(float a, float b) { return a + b; }

template <int W, class T>
FERRY_HD float rms_forward_fold(const RowMap& m, const T* x, int64_t r, int t) {
  float s = 0.0f;
  for_each_row_pack(m, r, t, [&](int64_t, int64_t i, int lanes) {
    float v[W];
    load_pack<W>(x, i, v);
    for (int j = 0; j < W; ++j)
      if (j < lanes) s = s + v[j] * v[j];
  });
  return s;
}

template <int W, class T>
FERRY_HD void rms_forward_write(const RowMap& m, T* out, float* rstd, const T* x, const T* w, int64_t r, int t,
                                float sum_squares, float eps) {
  const float rs = div_f(1.0f, sqrt_f(div_f(sum_squares, static_cast<float>(m.cols)) + eps));
  for_each_row_pack(m, r, t, [&](int64_t c, int64_t i, int lanes) {
    float v[W], wv[W];
    load_pack<W>(x, i, v);
    load_pack<W>(w, c, wv);
    for (int j = 0; j < W; ++j) v[j] = v[j] * rs * wv[j];
    store_pack<W>(out, i, v, lanes);
  });
  if (t == 0) rstd[r] = rs;
}

// ---- RMSNorm backward, row part: dx (N,C) += (or =, not accumulating) rstd (g - xhat mean(g xhat)), g = dout * w,
// xhat = x * rstd.
template <int W, class T>
FERRY_HD float rms_backward_fold(const RowMap& m, const T* dout, const T* x, const T* w, float rs, int64_t r, int t) {
  float s = 0.0f;
  for_each_row_pack(m, r, t, [&](int64_t c, int64_t i, int lanes) {
    float d[W], v[W], wv[W];
    load_pack<W>(dout, i, d);
    load_pack<W>(x, i, v);
    load_pack<W>(w, c, wv);
    for (int j = 0; j < W; ++j)
      if (j < lanes) s = s + d[j] * wv[j] * v[j] * rs;
  });
  return s;
}

template <int W, class T>
FERRY_HD void rms_backward_write(const RowMap& m, T* dx, const T* dout, const T* x, const T* w, float rs, int64_t r,
                                 int t, float sum, bool accumulate) {
  const float gx_mean = div_f(sum, static_cast<float>(m.cols));
  for_each_row_pack(m, r, t, [&](int64_t c, int64_t i, int lanes) {
    float d[W], v[W], wv[W];
    load_pack<W>(dout, i, d);
    load_pack<W>(x, i, v);
    load_pack<W>(w, c, wv);
    for (int j = 0; j < W; ++j) v[j] = rs * (d[j] * wv[j] - v[j] * rs * gx_mean);
    store_grad_pack<W>(dx, i, v, accumulate, lanes);
  });
}

// ---- Column partials of (rows, C): pw[chunk, c] = sum over the chunk's rows of dout * xhat, xhat = (x - mean)
// * rstd (skipped when x is null: embedding's token-type row; mean null: RMSNorm's, x * rstd), pb[chunk, c] =
// sum of dout (skipped when pb is null); then dst[c] += partials in chunk order.
template <class T>
FERRY_HD void column_partials(const ColumnMap& m, float* pw, float* pb, const T* dout, const T* x, const float* mean,
                              const float* rstd, int64_t bx, int t, int64_t chunk) {
  const int64_t c = column_of(m, bx, t);
  if (c >= m.cols) return;
  float sw = 0.0f, sb = 0.0f;
  for (int64_t r = chunk_begin(m, chunk); r < chunk_end(m, chunk); ++r) {
    const float d = load(dout, r * m.cols + c);
    if (x) sw = sw + d * ((load(x, r * m.cols + c) - (mean ? mean[r] : 0.0f)) * rstd[r]);
    sb = sb + d;
  }
  if (x) pw[chunk * m.cols + c] = sw;
  if (pb) pb[chunk * m.cols + c] = sb;
}

template <class T>
FERRY_HD void column_finish(const ColumnMap& m, T* dst, const float* partials, int64_t c) {
  if (c >= m.cols) return;
  float s = load(dst, c);
  for (int64_t k = 0; k < m.chunks; ++k) s = s + partials[k * m.cols + c];
  store(dst, c, s);
}

// ---- Softmax cross-entropy, row r of logits (N,stride) T, its first V (m.cols) columns the classes: the
// online-softmax state of the thread's entries. A partial last pack reads the padded columns after V (inside
// the row's stride) and leaves them out.
template <int W, class T>
FERRY_HD SoftmaxState ce_fold(const RowMap& m, const T* logits, int64_t r, int t) {
  SoftmaxState s = softmax_empty();
  for_each_row_pack(m, r, t, [&](int64_t, int64_t i, int lanes) {
    float v[W];
    load_pack<W>(logits, i, v);
    for (int j = 0; j < W; ++j)
      if (j < lanes) s = softmax_push(s, v[j]);
  });
  return s;
}

// losses[r] = log(sum) + max - logits[r, target]; 0 for an ignored target (< 0).
template <class T>
FERRY_HD float ce_loss(const RowMap& m, const T* logits, int32_t target, int64_t r, SoftmaxState s) {
  if (target < 0) return 0.0f;
  return (log_f(s.sum) + s.max) - load(logits, r * m.stride + target);
}

// The row's log-sum-exp, log(sum) + max, given back by its loss (loss = lse - logits[r, target], target >= 0):
// the backward needs no pass of its own over the row to find it. Off the forward's by about an ulp of the larger
// of the loss and |logits[r, target]| (negligible for logits of training's size; 0.004 for fp16 logits near
// 6e4); a target logit of -inf (an inf loss) makes the row's gradient NaN, which the step's check skips as it
// skips the inf loss.
template <class T>
FERRY_HD float ce_row_lse(const RowMap& m, const T* logits, const float* losses, int32_t target, int64_t r) {
  return losses[r] + load(logits, r * m.stride + target);
}

// dlogits[r, :V] += dloss * (softmax - onehot(target)), softmax = exp(logits - lse), the padded columns left as
// they are; the caller skips ignored rows. Not accumulating: dlogits[r, :V] = the same, and ce_zero_columns
// writes the padded ones. One read, one exp_f and one write a logit: the backward's instructions, not its bytes,
// bounded it (H200, GPT-2 124M at 16 x 1024: 2.66 ms with a folding pass and a division a logit, where its 4.9 GB
// took 1.03 ms at 4.8 TB/s).
template <int W, class T>
FERRY_HD void ce_backward_write(const RowMap& m, T* dlogits, const T* logits, int32_t target, float dloss, int64_t r,
                                int t, float lse, bool accumulate) {
  for_each_row_pack(m, r, t, [&](int64_t c, int64_t i, int lanes) {
    float v[W], old[W] = {};
    load_pack<W>(logits, i, v);
    if (accumulate) load_lanes<W>(dlogits, i, old, lanes);
    for (int j = 0; j < W; ++j) {
      const float p = dloss * exp_f(v[j] - lse);
      v[j] = accumulate ? old[j] + p : p;
      if (c + j == target) v[j] = v[j] - dloss;
    }
    store_pack<W>(dlogits, i, v, lanes);
  });
}

// dlogits[r, from:stride] = 0 (thread t's columns from + t, + block, ...): what a gradient written over, not
// added to, holds where the loss does not reach: a padded vocabulary's columns (from V), an ignored row (from 0).
template <class T>
FERRY_HD void ce_zero_columns(const RowMap& m, T* dlogits, int64_t r, int t, int64_t from) {
  for (int64_t c = from + t; c < m.stride; c += m.block) store(dlogits, r * m.stride + c, 0.0f);
}

// ---- Gradient sum of squares, pass 1: thread (block_id, t) over its grid-stride elements.
template <class T>
FERRY_HD SquaresState squares_fold(const ElementwiseMap& m, const T* g, int64_t block_id, int t) {
  SquaresState s{0.0, 0u, 0u};
  for (int64_t k = 0; k < m.per_thread; ++k) {
    const int64_t i = elementwise_index(m, block_id, t, k);
    if (i >= m.n) break;
    const float x = load(g, i);
    s.sum += static_cast<double>(x) * static_cast<double>(x);
    s.nonfinite |= is_finite_f(x) ? 0u : 1u;
  }
  return s;
}

// Pass 2 (one block): thread t folds partials t, t + block, ... in order.
FERRY_HD inline SquaresState squares_fold_partials(const SquaresState* partials, int64_t count, int block, int t) {
  SquaresState s{0.0, 0u, 0u};
  for (int64_t i = t; i < count; i += block) s = squares_merge(s, partials[i]);
  return s;
}

// ---- Embedding backward, the segment that starts at sorted position i (tokens sorted stably by id, so a
// segment lists one token's positions in increasing order): dwte[tok, c] += dout rows in that order, from
// the stored value on, so the fp32 sums equal the CPU op's bitwise.
template <class T>
FERRY_HD void embedding_segment(T* dwte, const T* dout, const int32_t* sorted_tokens, const int32_t* sorted_pos,
                                int64_t BT, int64_t C, int64_t i, int t, int block) {
  if (i > 0 && sorted_tokens[i - 1] == sorted_tokens[i]) return;  // not a segment start
  const int64_t tok = sorted_tokens[i];
  for (int64_t c = t; c < C; c += block) {
    float acc = load(dwte, tok * C + c);
    for (int64_t j = i; j < BT && sorted_tokens[j] == tok; ++j) acc = acc + load(dout, sorted_pos[j] * C + c);
    store(dwte, tok * C + c, acc);
  }
}

// dwpe[t, c] += sum over b of dout[b, t, c], b in order (the CPU op's order); element e = t * C + c.
template <class T>
FERRY_HD void embedding_position(T* dwpe, const T* dout, int64_t B, int64_t T_, int64_t C, int64_t e) {
  float acc = load(dwpe, e);
  for (int64_t b = 0; b < B; ++b) acc = acc + load(dout, b * T_ * C + e);
  store(dwpe, e, acc);
}

}  // namespace ferry::kernels::cuda
