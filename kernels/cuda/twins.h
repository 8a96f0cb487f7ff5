// Host twins of the CUDA row, reduction and elementwise kernels: the same per-thread bodies (row_ops.h,
// elementwise_ops.h) on the same launch map and path (16-byte packs or single elements, as the launch function
// picks from the shapes and the pointers' alignment) met in the same order (reduce.h), so a kernel must equal its
// twin bitwise; the twins are tested against kernels/cpu.
// Shapes as in kernels/cpu/ops.h; every backward adds (+=) into parameter gradients, and into activation
// gradients while `accumulate`, else writes them (=), as the kernels do (kernels/op_kernels.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "kernels/cuda/elementwise_ops.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/rope_ops.h"
#include "kernels/cuda/row_ops.h"

namespace ferry::kernels::cuda::twin {

// x, out (N,C); w, b (C); mean, rstd (N)
template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* x, const T* w, const T* b, int64_t N, int64_t C,
                       float eps) {
  const RowMap m = row_map_for<T>(N, C, C, out, x, w, b);
  std::vector<Moments> partial(m.block);
  with_width<T>(m.width, [&](auto width) {
    constexpr int W = decltype(width)::value;
    for (int64_t r = 0; r < N; ++r) {
      for (int t = 0; t < m.block; ++t) partial[t] = ln_forward_fold<W>(m, x, r, t);
      const Moments s = block_reduce_twin(partial.data(), m.block, Moments{0.0f, 0.0f, 0.0f}, moments_merge);
      for (int t = 0; t < m.block; ++t) ln_forward_write<W>(m, out, mean, rstd, x, w, b, r, t, s, eps);
    }
  });
}

// Column partials and their sums into dw and db (each may be null: embedding's token-type row has no x, RMSNorm
// no db), as the column kernels take them.
template <class T>
void column_sums_twin(T* dw, T* db, const T* dout, const T* x, const float* mean, const float* rstd, int64_t N,
                      int64_t C) {
  const ColumnMap cm = column_map(N, C);
  std::vector<float> pw(cm.chunks * C), pb(cm.chunks * C);
  for (int64_t chunk = 0; chunk < cm.chunks; ++chunk)
    for (int64_t bx = 0; bx < cm.grid_x; ++bx)
      for (int t = 0; t < cm.block; ++t)
        column_partials(cm, pw.data(), db ? pb.data() : nullptr, dout, x, mean, rstd, bx, t, chunk);
  for (int64_t c = 0; c < C; ++c) {
    if (dw) column_finish(cm, dw, pw.data(), c);
    if (db) column_finish(cm, db, pb.data(), c);
  }
}

// dx (N,C) += (or =); dw, db (C) +=; the column partials (2 * column_map(N, C).chunks * C floats) are the
// scratch the kernel takes from its caller.
template <class T>
void layernorm_backward(T* dx, T* dw, T* db, const T* dout, const T* x, const T* w, const float* mean,
                        const float* rstd, int64_t N, int64_t C, bool accumulate) {
  const RowMap m = row_map_for<T>(N, C, C, dx, dout, x, w);
  std::vector<SumPair> partial(m.block);
  with_width<T>(m.width, [&](auto width) {
    constexpr int W = decltype(width)::value;
    for (int64_t r = 0; r < N; ++r) {
      for (int t = 0; t < m.block; ++t) partial[t] = ln_backward_fold<W>(m, dout, x, w, mean[r], rstd[r], r, t);
      const SumPair s = block_reduce_twin(partial.data(), m.block, SumPair{0.0f, 0.0f}, sum_pair_merge);
      for (int t = 0; t < m.block; ++t) ln_backward_write<W>(m, dx, dout, x, w, mean[r], rstd[r], r, t, s, accumulate);
    }
  });
  column_sums_twin(dw, db, dout, x, mean, rstd, N, C);
}

// x, out (N,C); w (C); rstd (N)
template <class T>
void rmsnorm_forward(T* out, float* rstd, const T* x, const T* w, int64_t N, int64_t C, float eps) {
  const RowMap m = row_map_for<T>(N, C, C, out, x, w);
  std::vector<float> partial(m.block);
  with_width<T>(m.width, [&](auto width) {
    constexpr int W = decltype(width)::value;
    for (int64_t r = 0; r < N; ++r) {
      for (int t = 0; t < m.block; ++t) partial[t] = rms_forward_fold<W>(m, x, r, t);
      const float s = block_reduce_twin(partial.data(), m.block, 0.0f, sum_merge);
      for (int t = 0; t < m.block; ++t) rms_forward_write<W>(m, out, rstd, x, w, r, t, s, eps);
    }
  });
}

// dx (N,C) += (or =); dw (C, may be null) += through the column partials (rmsnorm_backward_scratch_floats).
template <class T>
void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const float* rstd, int64_t N, int64_t C,
                      bool accumulate) {
  const RowMap m = row_map_for<T>(N, C, C, dx, dout, x, w);
  std::vector<float> partial(m.block);
  with_width<T>(m.width, [&](auto width) {
    constexpr int W = decltype(width)::value;
    for (int64_t r = 0; r < N; ++r) {
      for (int t = 0; t < m.block; ++t) partial[t] = rms_backward_fold<W>(m, dout, x, w, rstd[r], r, t);
      const float s = block_reduce_twin(partial.data(), m.block, 0.0f, sum_merge);
      for (int t = 0; t < m.block; ++t) rms_backward_write<W>(m, dx, dout, x, w, rstd[r], r, t, s, accumulate);
    }
  });
  if (dw) column_sums_twin(dw, static_cast<T*>(nullptr), dout, x, static_cast<const float*>(nullptr), rstd, N, C);
}

// The block's softmax state of row r (what every thread of the kernel holds after the reduction).
template <int W, class T>
SoftmaxState softmax_row(const RowMap& m, const T* logits, int64_t r) {
  SoftmaxState partial[kRowBlock];
  for (int t = 0; t < m.block; ++t) partial[t] = ce_fold<W>(m, logits, r, t);
  return block_reduce_twin(partial, m.block, softmax_empty(), softmax_merge);
}

// logits (N,stride) of which the first V columns are the classes, targets (N), losses (N) fp32
template <class T>
void cross_entropy_forward(float* losses, const T* logits, const int32_t* targets, int64_t N, int64_t V,
                           int64_t stride) {
  const RowMap m = row_map_for<T>(N, V, stride, logits);
  with_width<T>(m.width, [&](auto width) {
    constexpr int W = decltype(width)::value;
    for (int64_t r = 0; r < N; ++r) losses[r] = ce_loss(m, logits, targets[r], r, softmax_row<W>(m, logits, r));
  });
}

// losses (N): the forward's, from which each row's log-sum-exp comes back (ce_row_lse) before any thread writes:
// dlogits may be the logits' own memory.
template <class T>
void cross_entropy_backward(T* dlogits, const T* logits, const int32_t* targets, const float* losses, float dloss,
                            int64_t N, int64_t V, int64_t stride, bool accumulate) {
  const RowMap m = row_map_for<T>(N, V, stride, dlogits, logits);
  with_width<T>(m.width, [&](auto width) {
    constexpr int W = decltype(width)::value;
    for (int64_t r = 0; r < N; ++r) {
      if (targets[r] < 0) {
        if (!accumulate)
          for (int t = 0; t < m.block; ++t) ce_zero_columns(m, dlogits, r, t, 0);
        continue;
      }
      const float lse = ce_row_lse(m, logits, losses, targets[r], r);
      for (int t = 0; t < m.block; ++t) {
        ce_backward_write<W>(m, dlogits, logits, targets[r], dloss, r, t, lse, accumulate);
        if (!accumulate) ce_zero_columns(m, dlogits, r, t, m.cols);
      }
    }
  });
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
  if (dtype)
    column_sums_twin(static_cast<T*>(nullptr), dtype, dout, static_cast<const T*>(nullptr), nullptr, nullptr, B * T_,
                     C);
}

// ---- Elementwise twins: the kernels' pack bodies over every pack of the kernels' map (no reduction, so the order
// is moot, and the bits are the same on either path).
template <class T, class F>
void for_each_pack(const ElementwiseMap& m, F&& f) {
  with_width<T>(m.width, [&](auto width) {
    for (int64_t b = 0; b < m.grid; ++b)
      for (int t = 0; t < m.block; ++t)
        for (int64_t k = 0; k < m.per_thread; ++k)
          if (const int64_t p = elementwise_index(m, b, t, k); p < map_packs(m)) f(width, p * m.width);
  });
}

template <class T>
void gelu_forward(T* out, const T* x, int64_t N, bool exact) {
  for_each_pack<T>(elementwise_map_for<T>(N, out, x),
                   [&](auto w, int64_t i) { gelu_forward_pack<decltype(w)::value>(out, x, i, exact); });
}

template <class T>
void gelu_backward(T* dx, const T* dout, const T* x, int64_t N, bool exact, bool accumulate) {
  for_each_pack<T>(elementwise_map_for<T>(N, dx, dout, x), [&](auto w, int64_t i) {
    gelu_backward_pack<decltype(w)::value>(dx, dout, x, i, exact, accumulate);
  });
}

template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t N) {
  for_each_pack<T>(elementwise_map_for<T>(N, out, gate, up),
                   [&](auto w, int64_t i) { swiglu_forward_pack<decltype(w)::value>(out, gate, up, i); });
}

template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t N, bool accumulate) {
  for_each_pack<T>(elementwise_map_for<T>(N, dgate, dup, dout, gate, up), [&](auto w, int64_t i) {
    swiglu_backward_pack<decltype(w)::value>(dgate, dup, dout, gate, up, i, accumulate);
  });
}

// x, out (B,T,H,hs) rows row_stride apart; false where the kernel refuses the head size.
template <class T>
bool rope_forward(T* out, const T* x, int64_t B, int64_t T_, int64_t H, int64_t hs, int64_t row_stride,
                  const RopeScaling& scaling) {
  RopeArgs a;
  if (!rope_args(&a, B, T_, H, hs, row_stride, scaling)) return false;
  for_each_pack<T>(rope_map(a, out, x),
                   [&](auto w, int64_t e) { rope_pack<decltype(w)::value>(a, out, x, e, 1.0f, false); });
  return true;
}

template <class T>
bool rope_backward(T* dx, const T* dout, int64_t B, int64_t T_, int64_t H, int64_t hs, int64_t row_stride,
                   const RopeScaling& scaling, bool accumulate) {
  RopeArgs a;
  if (!rope_args(&a, B, T_, H, hs, row_stride, scaling)) return false;
  for_each_pack<T>(rope_map(a, dx, dout),
                   [&](auto w, int64_t e) { rope_pack<decltype(w)::value>(a, dx, dout, e, -1.0f, accumulate); });
  return true;
}

template <class T>
void residual_forward(T* out, const T* a, const T* b, int64_t N) {
  for_each_pack<T>(elementwise_map_for<T>(N, out, a, b),
                   [&](auto w, int64_t i) { residual_forward_pack<decltype(w)::value>(out, a, b, i); });
}

template <class T>
void residual_backward(T* da, T* db, const T* dout, int64_t N, bool accumulate) {
  for_each_pack<T>(elementwise_map_for<T>(N, da, db, dout),
                   [&](auto w, int64_t i) { residual_backward_pack<decltype(w)::value>(da, db, dout, i, accumulate); });
}

template <class T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, const T* type, int64_t B,
                       int64_t T_, int64_t C) {
  for_each_pack<T>(embedding_forward_map(out, wte, wpe, type, B * T_ * C, C), [&](auto w, int64_t i) {
    embedding_forward_pack<decltype(w)::value>(out, tokens, wte, wpe, type, T_, C, i);
  });
}

}  // namespace ferry::kernels::cuda::twin
