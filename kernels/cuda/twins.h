// Host twins of the CUDA row and reduction kernels: the same per-thread bodies (row_ops.h) met in the same
// order (reduce.h), so a kernel must equal its twin bitwise; the twins are tested against kernels/cpu.
// Shapes as in kernels/cpu/ops.h; every backward adds (+=) into parameter gradients, and into activation
// gradients while `accumulate`, else writes them (=), as the kernels do (kernels/op_kernels.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "kernels/cuda/reduce.h"
#include "kernels/cuda/rope_ops.h"
#include "kernels/cuda/row_ops.h"

namespace ferry::kernels::cuda::twin {

// x, out (N,C); w, b (C); mean, rstd (N)
template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* x, const T* w, const T* b, int64_t N, int64_t C,
                       float eps) {
  const RowMap m = row_map(N, C);
  std::vector<Moments> partial(m.block);
  for (int64_t r = 0; r < N; ++r) {
    for (int t = 0; t < m.block; ++t) partial[t] = ln_forward_fold(m, x, r, t);
    const Moments s = block_reduce_twin(partial.data(), m.block, Moments{0.0f, 0.0f, 0.0f}, moments_merge);
    for (int t = 0; t < m.block; ++t) ln_forward_write(m, out, mean, rstd, x, w, b, r, t, s, eps);
  }
}

// dx (N,C) += (or =); dw, db (C) +=; the column partials (2 * column_map(N, C).chunks * C floats) are the
// scratch the kernel takes from its caller.
template <class T>
void layernorm_backward(T* dx, T* dw, T* db, const T* dout, const T* x, const T* w, const float* mean,
                        const float* rstd, int64_t N, int64_t C, bool accumulate) {
  const RowMap m = row_map(N, C);
  std::vector<SumPair> partial(m.block);
  for (int64_t r = 0; r < N; ++r) {
    for (int t = 0; t < m.block; ++t) partial[t] = ln_backward_fold(m, dout, x, w, mean[r], rstd[r], r, t);
    const SumPair s = block_reduce_twin(partial.data(), m.block, SumPair{0.0f, 0.0f}, sum_pair_merge);
    for (int t = 0; t < m.block; ++t) ln_backward_write(m, dx, dout, x, w, mean[r], rstd[r], r, t, s, accumulate);
  }
  const ColumnMap cm = column_map(N, C);
  std::vector<float> pw(cm.chunks * C), pb(cm.chunks * C);
  for (int64_t chunk = 0; chunk < cm.chunks; ++chunk)
    for (int64_t bx = 0; bx < cm.grid_x; ++bx)
      for (int t = 0; t < cm.block; ++t) column_partials(cm, pw.data(), pb.data(), dout, x, mean, rstd, bx, t, chunk);
  for (int64_t c = 0; c < C; ++c) column_finish(cm, dw, pw.data(), c), column_finish(cm, db, pb.data(), c);
}

// x, out (N,C); w (C); rstd (N)
template <class T>
void rmsnorm_forward(T* out, float* rstd, const T* x, const T* w, int64_t N, int64_t C, float eps) {
  const RowMap m = row_map(N, C);
  std::vector<float> partial(m.block);
  for (int64_t r = 0; r < N; ++r) {
    for (int t = 0; t < m.block; ++t) partial[t] = rms_forward_fold(m, x, r, t);
    const float s = block_reduce_twin(partial.data(), m.block, 0.0f, sum_merge);
    for (int t = 0; t < m.block; ++t) rms_forward_write(m, out, rstd, x, w, r, t, s, eps);
  }
}

// dx (N,C) += (or =); dw (C, may be null) += through the column partials (rmsnorm_backward_scratch_floats).
template <class T>
void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const float* rstd, int64_t N, int64_t C,
                      bool accumulate) {
  const RowMap m = row_map(N, C);
  std::vector<float> partial(m.block);
  for (int64_t r = 0; r < N; ++r) {
    for (int t = 0; t < m.block; ++t) partial[t] = rms_backward_fold(m, dout, x, w, rstd[r], r, t);
    const float s = block_reduce_twin(partial.data(), m.block, 0.0f, sum_merge);
    for (int t = 0; t < m.block; ++t) rms_backward_write(m, dx, dout, x, w, rstd[r], r, t, s, accumulate);
  }
  if (!dw) return;
  const ColumnMap cm = column_map(N, C);
  std::vector<float> pw(cm.chunks * C);
  for (int64_t chunk = 0; chunk < cm.chunks; ++chunk)
    for (int64_t bx = 0; bx < cm.grid_x; ++bx)
      for (int t = 0; t < cm.block; ++t)
        column_partials(cm, pw.data(), static_cast<float*>(nullptr), dout, x, nullptr, rstd, bx, t, chunk);
  for (int64_t c = 0; c < C; ++c) column_finish(cm, dw, pw.data(), c);
}

// The block's softmax state of row r (what every thread of the kernel holds after the reduction).
template <class T>
SoftmaxState softmax_row(const RowMap& m, const T* logits, int64_t r) {
  SoftmaxState partial[kRowBlock];
  for (int t = 0; t < m.block; ++t) partial[t] = ce_fold(m, logits, r, t);
  return block_reduce_twin(partial, m.block, softmax_empty(), softmax_merge);
}

// logits (N,stride) of which the first V columns are the classes, targets (N), losses (N) fp32
template <class T>
void cross_entropy_forward(float* losses, const T* logits, const int32_t* targets, int64_t N, int64_t V,
                           int64_t stride) {
  const RowMap m = row_map(N, V, stride);
  for (int64_t r = 0; r < N; ++r) losses[r] = ce_loss(m, logits, targets[r], r, softmax_row(m, logits, r));
}

template <class T>
void cross_entropy_backward(T* dlogits, const T* logits, const int32_t* targets, float dloss, int64_t N, int64_t V,
                            int64_t stride, bool accumulate) {
  const RowMap m = row_map(N, V, stride);
  for (int64_t r = 0; r < N; ++r) {
    if (targets[r] < 0) {
      if (!accumulate)
        for (int t = 0; t < m.block; ++t) ce_zero_columns(m, dlogits, r, t, 0);
      continue;
    }
    const SoftmaxState s = softmax_row(m, logits, r);
    for (int t = 0; t < m.block; ++t) {
      ce_backward_write(m, dlogits, logits, targets[r], dloss, r, t, s, accumulate);
      if (!accumulate) ce_zero_columns(m, dlogits, r, t, m.cols);
    }
  }
}

// grad (n) -> sum of squares (double) and whether any element is inf or NaN.
template <class T>
SquaresState sum_squares(const T* grad, int64_t n) {
  const SumSquaresMap mp = sum_squares_map(n);
  const int block = mp.pass1.block;
  std::vector<SquaresState> partials(mp.pass1.grid), lanes(block);
  for (int64_t bid = 0; bid < mp.pass1.grid; ++bid) {
    for (int t = 0; t < block; ++t) lanes[t] = squares_fold(mp.pass1, grad, bid, t);
    partials[bid] = block_reduce_twin(lanes.data(), block, SquaresState{0.0, 0u, 0u}, squares_merge);
  }
  std::vector<SquaresState> lanes2(mp.block2);
  for (int t = 0; t < mp.block2; ++t) lanes2[t] = squares_fold_partials(partials.data(), mp.pass1.grid, mp.block2, t);
  return block_reduce_twin(lanes2.data(), mp.block2, SquaresState{0.0, 0u, 0u}, squares_merge);
}

// The positions 0..BT-1 sorted stably by token id (what a stable radix sort of (token, position) gives).
inline void sort_tokens(std::vector<int32_t>& sorted_tokens, std::vector<int32_t>& sorted_pos, const int32_t* tokens,
                        int64_t BT) {
  sorted_pos.resize(BT);
  std::iota(sorted_pos.begin(), sorted_pos.end(), 0);
  std::stable_sort(sorted_pos.begin(), sorted_pos.end(), [&](int32_t a, int32_t b) { return tokens[a] < tokens[b]; });
  sorted_tokens.resize(BT);
  for (int64_t i = 0; i < BT; ++i) sorted_tokens[i] = tokens[sorted_pos[i]];
}

// dwte (V,C), dwpe (maxT,C), dtype (C, may be null) += ..., from dout (B,T,C) and tokens (B,T).
template <class T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B, int64_t T_, int64_t C,
                        T* dtype = nullptr) {
  std::vector<int32_t> st, sp;
  sort_tokens(st, sp, tokens, B * T_);
  for (int64_t i = 0; i < B * T_; ++i)
    for (int t = 0; t < kRowBlock; ++t) embedding_segment(dwte, dout, st.data(), sp.data(), B * T_, C, i, t, kRowBlock);
  for (int64_t e = 0; e < T_ * C; ++e) embedding_position(dwpe, dout, B, T_, C, e);
  if (!dtype) return;
  const ColumnMap cm = column_map(B * T_, C);
  std::vector<float> pb(cm.chunks * C);
  for (int64_t chunk = 0; chunk < cm.chunks; ++chunk)
    for (int64_t bx = 0; bx < cm.grid_x; ++bx)
      for (int t = 0; t < cm.block; ++t)
        column_partials<T>(cm, nullptr, pb.data(), dout, nullptr, nullptr, nullptr, bx, t, chunk);
  for (int64_t c = 0; c < C; ++c) column_finish(cm, dtype, pb.data(), c);
}

// ---- Elementwise twins: the kernels' per-element code over every index (no reduction, so order is moot).
template <class T>
void gelu_forward(T* out, const T* x, int64_t N, bool exact) {
  for (int64_t i = 0; i < N; ++i) store(out, i, gelu_forward_f(load(x, i), exact));
}

template <class T>
void gelu_backward(T* dx, const T* dout, const T* x, int64_t N, bool exact, bool accumulate) {
  for (int64_t i = 0; i < N; ++i) store_grad(dx, i, load(dout, i) * gelu_backward_f(load(x, i), exact), accumulate);
}

template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t N) {
  for (int64_t i = 0; i < N; ++i) store(out, i, swiglu_forward_f(load(gate, i), load(up, i)));
}

template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t N, bool accumulate) {
  for (int64_t i = 0; i < N; ++i) {
    const SwiGluGrads g = swiglu_backward_f(load(gate, i), load(up, i), load(dout, i));
    store_grad(dgate, i, g.dgate, accumulate);
    store_grad(dup, i, g.dup, accumulate);
  }
}

// x, out (B,T,H,hs) rows row_stride apart; false where the kernel refuses the head size.
template <class T>
bool rope_forward(T* out, const T* x, int64_t B, int64_t T_, int64_t H, int64_t hs, int64_t row_stride,
                  const RopeScaling& scaling) {
  RopeArgs a;
  if (!rope_args(&a, B, T_, H, hs, row_stride, scaling)) return false;
  for (int64_t e = 0; e < rope_pairs(a); ++e) rope_pair(a, out, x, e, 1.0f, false);
  return true;
}

template <class T>
bool rope_backward(T* dx, const T* dout, int64_t B, int64_t T_, int64_t H, int64_t hs, int64_t row_stride,
                   const RopeScaling& scaling, bool accumulate) {
  RopeArgs a;
  if (!rope_args(&a, B, T_, H, hs, row_stride, scaling)) return false;
  for (int64_t e = 0; e < rope_pairs(a); ++e) rope_pair(a, dx, dout, e, -1.0f, accumulate);
  return true;
}

template <class T>
void residual_forward(T* out, const T* a, const T* b, int64_t N) {
  for (int64_t i = 0; i < N; ++i) store(out, i, load(a, i) + load(b, i));
}

template <class T>
void residual_backward(T* da, T* db, const T* dout, int64_t N, bool accumulate) {
  for (int64_t i = 0; i < N; ++i)
    store_grad(da, i, load(dout, i), accumulate), store_grad(db, i, load(dout, i), accumulate);
}

template <class T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, const T* type, int64_t B,
                       int64_t T_, int64_t C) {
  for (int64_t e = 0; e < B * T_ * C; ++e) {
    const int64_t r = e / C, c = e % C;
    float v = load(wte, static_cast<int64_t>(tokens[r]) * C + c);
    if (type) v = v + load(type, c);
    store(out, e, wpe ? v + load(wpe, (r % T_) * C + c) : v);
  }
}

}  // namespace ferry::kernels::cuda::twin
