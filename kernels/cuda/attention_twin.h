// Host twin of the flash attention kernels (attention_flash.cu): the same blocks, tiles and per-thread phases
// (attention_math.h) run one thread after another, barriers being the phase boundaries, and the 16 lanes of
// a row meeting by the replayed butterfly; so the kernels must equal it bitwise. Tested against the CPU op
// (kernels/cpu/attention.cpp). Shapes: see attn::Geometry; backward accumulates (+=), or writes (=) when told.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "kernels/cuda/attention_math.h"

namespace ferry::kernels::cuda::twin {

namespace detail {

using namespace attn;

// The 16 lanes of each row group combine v[t][r] (t = ty*16 + tx) as the kernel's shuffles do.
template <class Op>
void rows_butterfly(std::vector<std::array<float, kMicro>>& v, Op op) {
  for (int ty = 0; ty < kSide; ++ty)
    for (int r = 0; r < kMicro; ++r) {
      float lanes[kSide];
      for (int l = 0; l < kSide; ++l) lanes[l] = v[ty * kSide + l][r];
      lane_butterfly(lanes, op);
      for (int l = 0; l < kSide; ++l) v[ty * kSide + l][r] = lanes[l];
    }
}

template <class T, int kCols>
void forward_block(const Geometry& g, T* out, float* lse, const T* q, const T* k, const T* v, const int32_t* mask,
                   int64_t qt, std::vector<float>& smem) {
  const Smem sm = carve(smem.data(), Pass::Forward, g.pitch);
  const int64_t q0 = qt * kTile;
  std::vector<ForwardThread<kCols>> th(kThreads);
  std::vector<std::array<float, kMicro>> mx(kThreads);
  for (int t = 0; t < kThreads; ++t) load_tile(sm.q, g.pitch, q, g.rs, q0, g.T, g.hs, t), forward_init(th[t]);
  for (int64_t kt = 0; kt < key_tile_end(g, qt); ++kt) {
    const int64_t k0 = kt * kTile;
    for (int t = 0; t < kThreads; ++t) {
      load_tile(sm.k, g.pitch, k, g.krs, k0, g.T, g.hs, t);
      load_tile(sm.v, g.pitch, v, g.krs, k0, g.T, g.hs, t);
      load_key_ok(sm.key_ok, mask, k0, g.T, t);
    }
    for (int t = 0; t < kThreads; ++t) forward_scores(th[t], mx[t].data(), sm, g, q0, k0, t / kSide, t % kSide);
    rows_butterfly(mx, MaxOp{});
    for (int t = 0; t < kThreads; ++t) forward_probs(th[t], mx[t].data(), sm, t / kSide, t % kSide);
    for (int t = 0; t < kThreads; ++t) forward_accumulate(th[t], sm, g, t / kSide, t % kSide);
  }
  std::vector<std::array<float, kMicro>> l(kThreads);
  for (int t = 0; t < kThreads; ++t)
    for (int r = 0; r < kMicro; ++r) l[t][r] = th[t].l[r];
  rows_butterfly(l, AddOp{});
  for (int t = 0; t < kThreads; ++t) forward_write(th[t], l[t].data(), out, lse, g, q0, t / kSide, t % kSide);
}

template <class T>
void load_queries(const Smem& sm, const Geometry& g, const T* q, const T* dout, const float* lse, const float* d,
                  int64_t q0) {
  for (int t = 0; t < kThreads; ++t) {
    load_tile(sm.q, g.pitch, q, g.rs, q0, g.T, g.hs, t);
    load_tile(sm.dout, g.pitch, dout, g.C, q0, g.T, g.hs, t);
    load_query_stats(sm.lse, sm.d, lse, d, q0, g.T, t);
  }
}

template <class T>
void load_keys(const Smem& sm, const Geometry& g, const T* k, const T* v, const int32_t* mask, int64_t k0) {
  for (int t = 0; t < kThreads; ++t) {
    load_tile(sm.k, g.pitch, k, g.krs, k0, g.T, g.hs, t);
    load_tile(sm.v, g.pitch, v, g.krs, k0, g.T, g.hs, t);
    load_key_ok(sm.key_ok, mask, k0, g.T, t);
  }
}

// Pointers at (b, h) of every input of the backward passes (k, v at h's key/value head).
template <class T>
struct Head {
  const T *q, *k, *v, *dout;
  const int32_t* mask;
  const float *lse, *d;
};

// The block of key tile kt of one key/value head: `members` are the query heads that read it, in order.
template <class T, int kCols>
void key_value_block(const Geometry& g, T* dk, T* dv, const std::vector<Head<T>>& members, int64_t kt,
                     std::vector<float>& smem, bool accumulate) {
  const Smem sm = carve(smem.data(), Pass::KeyValue, g.pitch);
  const int64_t k0 = kt * kTile;
  load_keys(sm, g, members[0].k, members[0].v, members[0].mask, k0);
  std::vector<KeyValueThread<kCols>> th(kThreads);
  for (auto& x : th) key_value_init(x);
  for (const Head<T>& in : members)
    for (int64_t qt = query_tile_begin(g, kt); qt < tile_count(g.T); ++qt) {
      load_queries(sm, g, in.q, in.dout, in.lse, in.d, qt * kTile);
      for (int t = 0; t < kThreads; ++t) key_value_scores(sm, g, qt * kTile, k0, t / kSide, t % kSide);
      for (int t = 0; t < kThreads; ++t) key_value_accumulate(th[t], sm, g, t / kSide, t % kSide);
    }
  for (int t = 0; t < kThreads; ++t) key_value_write(th[t], dk, dv, g, k0, t / kSide, t % kSide, accumulate);
}

template <class T, int kCols>
void query_block(const Geometry& g, T* dq, const Head<T>& in, int64_t qt, std::vector<float>& smem, bool accumulate) {
  const Smem sm = carve(smem.data(), Pass::Query, g.pitch);
  const int64_t q0 = qt * kTile;
  load_queries(sm, g, in.q, in.dout, in.lse, in.d, q0);
  std::vector<QueryThread<kCols>> th(kThreads);
  for (auto& x : th) query_init(x);
  for (int64_t kt = 0; kt < key_tile_end(g, qt); ++kt) {
    load_keys(sm, g, in.k, in.v, in.mask, kt * kTile);
    for (int t = 0; t < kThreads; ++t) query_scores(sm, g, q0, kt * kTile, t / kSide, t % kSide);
    for (int t = 0; t < kThreads; ++t) query_accumulate(th[t], sm, g, t / kSide, t % kSide);
  }
  for (int t = 0; t < kThreads; ++t) query_write(th[t], dq, g, q0, t / kSide, t % kSide, accumulate);
}

template <class T, int kCols>
void forward(const Geometry& g, T* out, float* lse, const T* q, const T* k, const T* v, const int32_t* key_mask) {
  std::vector<float> smem(smem_floats(Pass::Forward, g.pitch));
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t h = 0; h < g.NH; ++h) {
      const int64_t head = b * g.T * g.rs + h * g.hs, kv = b * g.T * g.krs + kv_head(g, h) * g.hs;
      for (int64_t qt = 0; qt < tile_count(g.T); ++qt)
        forward_block<T, kCols>(g, out + b * g.T * g.C + h * g.hs, lse + (b * g.NH + h) * g.T, q + head, k + kv, v + kv,
                                key_mask ? key_mask + b * g.T : nullptr, qt, smem);
    }
}

template <class T, int kCols>
void backward(const Geometry& g, T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
              const int32_t* key_mask, const T* out, const float* lse, bool accumulate) {
  std::vector<float> d(g.B * g.NH * g.T);  // the kernels' scratch: D = rowsum(dout * out)
  for (int64_t n = 0; n < g.B * g.NH * g.T; ++n) {
    const int64_t i = n % g.T, bh = n / g.T, h = bh % g.NH, b = bh / g.NH;
    const int64_t e = b * g.T * g.C + i * g.C + h * g.hs;
    d[n] = row_dot(dout + e, out + e, g.hs);
  }
  std::vector<float> smem(smem_floats(Pass::KeyValue, g.pitch));  // the larger of the two passes
  auto head_of = [&](int64_t b, int64_t h) {
    const int64_t head = b * g.T * g.rs + h * g.hs, stats = (b * g.NH + h) * g.T;
    const int64_t kv = b * g.T * g.krs + kv_head(g, h) * g.hs;
    return Head<T>{
        q + head,    k + kv,          v + kv, dout + b * g.T * g.C + h * g.hs, key_mask ? key_mask + b * g.T : nullptr,
        lse + stats, d.data() + stats};
  };
  for (int64_t b = 0; b < g.B; ++b)  // the dK/dV pass, then the dQ pass (two launches)
    for (int64_t kv = 0; kv < g.KV; ++kv) {
      std::vector<Head<T>> members;
      for (int64_t h = first_query_head(g, kv); h < first_query_head(g, kv + 1); ++h) members.push_back(head_of(b, h));
      for (int64_t kt = 0; kt < tile_count(g.T); ++kt) {
        const int64_t head = b * g.T * g.krs + kv * g.hs;
        key_value_block<T, kCols>(g, dk + head, dv + head, members, kt, smem, accumulate);
      }
    }
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t h = 0; h < g.NH; ++h)
      for (int64_t qt = 0; qt < tile_count(g.T); ++qt)
        query_block<T, kCols>(g, dq + b * g.T * g.rs + h * g.hs, head_of(b, h), qt, smem, accumulate);
}

}  // namespace detail

// out (B,T,C), lse (B,NH,T) from q ((B,T,C) view, rows g.rs apart), k, v ((B,T,KV*hs) views, rows g.krs
// apart), key_mask (B,T) or null.
template <class T>
void attention_forward(const attn::Geometry& g, T* out, float* lse, const T* q, const T* k, const T* v,
                       const int32_t* key_mask) {
  if (attn::cols_for(g.hs) == 4)
    detail::forward<T, 4>(g, out, lse, q, k, v, key_mask);
  else
    detail::forward<T, 8>(g, out, lse, q, k, v, key_mask);
}

// dq, dk, dv (the views of q, k, v) += the gradients (= when not accumulating), from the forward's out and lse.
template <class T>
void attention_backward(const attn::Geometry& g, T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                        const int32_t* key_mask, const T* out, const float* lse, bool accumulate) {
  if (attn::cols_for(g.hs) == 4) detail::backward<T, 4>(g, dq, dk, dv, dout, q, k, v, key_mask, out, lse, accumulate);
  else detail::backward<T, 8>(g, dq, dk, dv, dout, q, k, v, key_mask, out, lse, accumulate);
}

}  // namespace ferry::kernels::cuda::twin
