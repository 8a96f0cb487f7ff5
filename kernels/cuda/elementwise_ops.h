// The bodies of the elementwise kernels over one pack of W elements starting at element i (pack.h: W = 1 is
// the scalar path), shared by the kernels (elementwise.cu) and their host twins (twins.h). The per-element math
// is math.h's whatever W is, so both paths give the same bits.
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/math.h"
#include "kernels/cuda/pack.h"

namespace ferry::kernels::cuda {

template <int W, class T>
FERRY_HD void gelu_forward_pack(T* out, const T* x, int64_t i, bool exact) {
  float v[W];
  load_pack<W>(x, i, v);
  for (int j = 0; j < W; ++j) v[j] = gelu_forward_f(v[j], exact);
  store_pack<W>(out, i, v);
}

template <int W, class T>
FERRY_HD void gelu_backward_pack(T* dx, const T* dout, const T* x, int64_t i, bool exact, bool accumulate) {
  float d[W], v[W];
  load_pack<W>(dout, i, d);
  load_pack<W>(x, i, v);
  for (int j = 0; j < W; ++j) v[j] = d[j] * gelu_backward_f(v[j], exact);
  store_grad_pack<W>(dx, i, v, accumulate);
}

template <int W, class T>
FERRY_HD void swiglu_forward_pack(T* out, const T* gate, const T* up, int64_t i) {
  float g[W], u[W];
  load_pack<W>(gate, i, g);
  load_pack<W>(up, i, u);
  for (int j = 0; j < W; ++j) g[j] = swiglu_forward_f(g[j], u[j]);
  store_pack<W>(out, i, g);
}

template <int W, class T>
FERRY_HD void swiglu_backward_pack(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t i,
                                   bool accumulate) {
  float g[W], u[W], d[W];
  load_pack<W>(gate, i, g);
  load_pack<W>(up, i, u);
  load_pack<W>(dout, i, d);
  for (int j = 0; j < W; ++j) {
    const SwiGluGrads s = swiglu_backward_f(g[j], u[j], d[j]);
    g[j] = s.dgate, u[j] = s.dup;
  }
  store_grad_pack<W>(dgate, i, g, accumulate);
  store_grad_pack<W>(dup, i, u, accumulate);
}

template <int W, class T>
FERRY_HD void residual_forward_pack(T* out, const T* a, const T* b, int64_t i) {
  float x[W], y[W];
  load_pack<W>(a, i, x);
  load_pack<W>(b, i, y);
  for (int j = 0; j < W; ++j) x[j] = x[j] + y[j];
  store_pack<W>(out, i, x);
}

template <int W, class T>
FERRY_HD void residual_backward_pack(T* da, T* db, const T* dout, int64_t i, bool accumulate) {
  float d[W], e[W];
  load_pack<W>(dout, i, d);
  for (int j = 0; j < W; ++j) e[j] = d[j];
  store_grad_pack<W>(da, i, d, accumulate);
  store_grad_pack<W>(db, i, e, accumulate);
}

// out (B,T,C) = (wte[token] + type) + wpe[t]; a pack lies in one row (W divides C), so it reads W consecutive
// elements of each table. I is the kernel's index type (the row and column divisions are done in it).
template <int W, class T, class I>
FERRY_HD void embedding_forward_pack(T* out, const int32_t* tokens, const T* wte, const T* wpe, const T* type,
                                     int64_t T_, int64_t C, I i) {
  const I r = i / static_cast<I>(C), c = i % static_cast<I>(C);
  float v[W], add[W];
  load_pack<W>(wte, static_cast<int64_t>(tokens[r]) * C + c, v);
  if (type) {
    load_pack<W>(type, c, add);
    for (int j = 0; j < W; ++j) v[j] = v[j] + add[j];
  }
  if (wpe) {  // no position table: Llama's rotary positions
    load_pack<W>(wpe, (r % static_cast<I>(T_)) * C + c, add);
    for (int j = 0; j < W; ++j) v[j] = v[j] + add[j];
  }
  store_pack<W>(out, i, v);
}

// The map of embedding_forward: packs only when one fits in a row.
template <class T>
ElementwiseMap embedding_forward_map(const T* out, const T* wte, const T* wpe, const T* type, int64_t n, int64_t C) {
  if (C % kPackWidth<T> != 0) return elementwise_map(n);
  return elementwise_map_for<T>(n, out, wte, wpe, type);
}

}  // namespace ferry::kernels::cuda
