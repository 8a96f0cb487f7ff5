// The flash attention's per-thread bodies, shared by the kernels (attention_flash.cu) and their host twin
// (attention_twin.h): tiles, shared-memory layout, masks, the online-softmax step and the three passes'
// phases. A kernel and its twin differ only in who runs the phases (256 threads vs a loop) and in how the 16
// threads of a row meet (shuffles vs the replay of lane_butterfly), so they agree bitwise.
//
// Per head, S = q k^T * scale (scale = 1/sqrt(hs)), masked to -inf; P = softmax(S) by rows; out = P v;
// lse_i = log sum_j e^{S_ij}. Backward with D_i = rowsum(dout_i * out_i) and P_ij = e^{S_ij - lse_i}:
//   dv_j += sum_i P_ij dout_i;  dS_ij = P_ij (dout_i . v_j - D_i) * scale;  dk_j += sum_i dS_ij q_i;
//   dq_i += sum_j dS_ij k_j   (= for all three when the op is told not to accumulate).
// A block takes one 64-row tile (queries or keys) of one (b, h); its 16 x 16 threads each own a 4 x 4
// micro-tile of the 64 x 64 score tile: rows ty*4 + r (its own rows: the accumulators' rows too) and columns
// tx + 16 c (interleaved: with the odd pitch below, 16 lanes read 16 banks). Every dot product runs over the
// head's channels in order and every accumulator over keys (or queries) in order, tile after tile.
// Why these sizes: 64-row tiles of q, k, v, dout in fp32 with P and dS take 166 KB of shared memory in the
// dK/dV pass at hs = 128 (H100/H200 allow 227 KB a block); a 4 x 4 micro-tile is 16 fmas for 8 shared loads,
// and with up to 8 accumulator columns a thread holds at most 64 accumulators (no spills: ptxas checks).
// Scalar fp32 fmas, no tensor cores: the fp32 path and the reference; cuDNN's SDPA is the fast path.
#pragma once

#include <cstdint>

#include "kernels/cuda/math.h"
#include "foundation/precision.h"

// Loops over a micro-tile's rows and columns unroll on the device, so the accumulators live in registers.
#if defined(__CUDA_ARCH__)
#define FERRY_UNROLL _Pragma("unroll")
#else
#define FERRY_UNROLL
#endif

namespace ferry::kernels::cuda::attn {

constexpr int kTile = 64;                 // rows of a query tile, of a key tile
constexpr int kSide = 16;                 // threads along each side of the score tile
constexpr int kThreads = kSide * kSide;   // 256 (8 warps)
constexpr int kMicro = kTile / kSide;     // 4: a thread's micro-tile is 4 x 4
constexpr int kMaxHeadSize = 128;
constexpr int kProbPitch = kTile + 1;     // odd: rows of the P / dS tiles start in different banks

// One attention call as the kernels see it. Elements: q (b, t, h, c) at b*T*rs + t*rs + h*hs + c; k/v
// (b, t, kv, c) at b*T*krs + t*krs + kv*hs + c, kv = kv_head(h) (grouped-query attention: KV < NH heads,
// each read by NH/KV consecutive query heads); out/dout at b*T*C + t*C + h*hs + c; lse, D (b, h, t) at
// (b*NH + h)*T + t.
struct Geometry {
  int64_t B, T, NH, hs, rs, C;
  float scale;
  bool causal;
  int pitch;  // floats between rows of a q/k/v/dout tile in shared memory: hs + 1 (odd for even hs, so
              // the 16 lanes reading rows tx + 16 j at one channel hit 16 different banks)
  int64_t KV, krs;
};

// kv_heads, kv_row_stride 0: as many as the query heads, rows as q's.
inline Geometry make_geometry(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t row_stride, bool causal,
                              int64_t kv_heads = 0, int64_t kv_row_stride = 0) {
  const int64_t hs = C / NH;
  return {B,
          T,
          NH,
          hs,
          row_stride,
          C,
          div_f(1.0f, sqrt_f(static_cast<float>(hs))),
          causal,
          static_cast<int>(hs + 1),
          kv_heads ? kv_heads : NH,
          kv_row_stride ? kv_row_stride : row_stride};
}

// The key/value head query head h reads, and the first of the query heads that read key/value head kv.
FERRY_HD inline int64_t kv_head(const Geometry& g, int64_t h) { return h / (g.NH / g.KV); }
FERRY_HD inline int64_t first_query_head(const Geometry& g, int64_t kv) { return kv * (g.NH / g.KV); }

FERRY_HD inline int64_t tile_count(int64_t T) { return (T + kTile - 1) / kTile; }
// Key tiles query tile qt meets: all, or with the causal mask those up to its own (tiles are equal).
FERRY_HD inline int64_t key_tile_end(const Geometry& g, int64_t qt) { return g.causal ? qt + 1 : tile_count(g.T); }
FERRY_HD inline int64_t query_tile_begin(const Geometry& g, int64_t kt) { return g.causal ? kt : 0; }

// Accumulator columns per thread: hs <= 16 * kCols (kernels are instantiated for kCols 4 and 8).
FERRY_HD inline int cols_for(int64_t hs) { return hs <= 64 ? 4 : 8; }

// ---- Shared memory (floats), one carve per pass; the twin allocates the same floats on the host.
struct Smem {
  float *q, *k, *v, *dout;  // 64 rows of `pitch` each
  float *p, *ds;            // 64 x kProbPitch: P (forward, dK/dV) and dS (backward), row = the thread's row
  float *lse, *d, *key_ok;  // 64 each: the tile's queries' lse and D, the tile's keys' visibility (0/1)
};

enum class Pass { Forward, KeyValue, Query };

FERRY_HD inline int64_t smem_floats(Pass pass, int pitch) {
  const int64_t rows = int64_t{kTile} * pitch, probs = int64_t{kTile} * kProbPitch;
  switch (pass) {
    case Pass::Forward: return 3 * rows + probs + kTile;                 // q k v, P, key_ok
    case Pass::KeyValue: return 4 * rows + 2 * probs + 3 * kTile;        // q k v dout, P dS, lse D key_ok
    case Pass::Query: return 4 * rows + probs + 3 * kTile;               // q k v dout, dS, lse D key_ok
  }
  return 0;
}

FERRY_HD inline Smem carve(float* base, Pass pass, int pitch) {
  const int64_t rows = int64_t{kTile} * pitch, probs = int64_t{kTile} * kProbPitch;
  Smem s{};
  float* f = base;
  s.q = f, f += rows;
  s.k = f, f += rows;
  s.v = f, f += rows;
  if (pass != Pass::Forward) s.dout = f, f += rows;
  s.p = f, f += probs;
  if (pass == Pass::KeyValue) s.ds = f, f += probs;
  if (pass == Pass::Query) s.ds = s.p;  // the dQ pass needs dS only
  if (pass != Pass::Forward) s.lse = f, f += kTile, s.d = f, f += kTile;
  s.key_ok = f;
  return s;
}

FERRY_HD inline float neg_inf() { return -bits_float(0x7f800000u); }

// ---- Loads (thread t of the block), zero rows beyond T. src points at (b, row 0, h, channel 0).
template <class T>
FERRY_HD void load_tile(float* dst, int pitch, const T* src, int64_t row_stride, int64_t row0, int64_t rows_total,
                        int64_t hs, int t) {
  const int h = static_cast<int>(hs);  // 32-bit index math: a tile holds at most 64 * 128 elements
  for (int e = t; e < kTile * h; e += kThreads) {
    const int r = e / h, c = e % h;
    dst[r * pitch + c] = row0 + r < rows_total ? load(src, (row0 + r) * row_stride + c) : 0.0f;
  }
}

// key_ok[j]: key k0 + j exists and is no padding. mask points at row b of key_mask (or is null).
FERRY_HD inline void load_key_ok(float* key_ok, const int32_t* mask, int64_t k0, int64_t T, int t) {
  if (t >= kTile) return;
  const int64_t j = k0 + t;
  key_ok[t] = j < T && (!mask || mask[j] != 0) ? 1.0f : 0.0f;
}

// lse and D of the tile's queries (a query beyond T: lse -inf, so its P is 0).
FERRY_HD inline void load_query_stats(float* lse_s, float* d_s, const float* lse, const float* d, int64_t q0,
                                      int64_t T, int t) {
  if (t >= kTile) return;
  const bool in = q0 + t < T;
  lse_s[t] = in ? lse[q0 + t] : neg_inf();
  d_s[t] = in ? d[q0 + t] : 0.0f;
}

// ---- The math of one score.
// Query i sees key j (both absolute): both exist, the key is no padding, and j <= i under the causal mask.
FERRY_HD inline bool visible(const Geometry& g, int64_t i, int64_t j, float key_ok) {
  return i < g.T && key_ok != 0.0f && (!g.causal || j <= i);
}

// e^{s - m} for a visible score; 0 for a masked one or where the row has no visible key (m = -inf).
FERRY_HD inline float exp_shifted(float s, float m) { return s == neg_inf() || m == neg_inf() ? 0.0f : exp_f(s - m); }

// dS = P (dP - D) scale, the softmax's backward at one score.
FERRY_HD inline float score_grad(float p, float dp, float d, float scale) { return p * (dp - d) * scale; }

// ---- The micro-tile products. Register-blocked (each step loads 4 + 4 or 4 + kCols values for 16 or
// 4 kCols fmas) while every element still sums in a fixed order: channels 0..hs-1, or rows 0..63.
//
// dots[r][j] = sum_c a[own(r)][c] b[inter(j)][c] (a's rows ty*4 + r, b's rows tx + 16 j; each a tile of
// `pitch`). fma(a, b, acc) = fma(b, a, acc): the dK/dV pass, with keys as a, gets the forward's scores.
FERRY_HD inline void micro_dots(float (&dots)[kMicro][kMicro], const float* a, const float* b, int pitch, int64_t hs,
                                int ty, int tx) {
  FERRY_UNROLL
  for (int r = 0; r < kMicro; ++r)
    FERRY_UNROLL
    for (int j = 0; j < kMicro; ++j) dots[r][j] = 0.0f;
  const float* ar = a + ty * kMicro * pitch;
  const float* bj = b + tx * pitch;
  for (int64_t c = 0; c < hs; ++c) {
    float x[kMicro], y[kMicro];
    FERRY_UNROLL
    for (int r = 0; r < kMicro; ++r) x[r] = ar[r * pitch + c];
    FERRY_UNROLL
    for (int j = 0; j < kMicro; ++j) y[j] = bj[j * kSide * pitch + c];
    FERRY_UNROLL
    for (int r = 0; r < kMicro; ++r)
      FERRY_UNROLL
      for (int j = 0; j < kMicro; ++j) dots[r][j] = fma_f(x[r], y[j], dots[r][j]);
  }
}

// acc[r][c] += sum_i w[ty*4 + r][i] x[i][tx + 16 c], i = 0..63 in order (w: a P or dS tile, x: a
// q/k/v/dout tile); channels at or beyond hs are left alone.
template <int kCols>
FERRY_HD void micro_accumulate(float (&acc)[kMicro][kCols], const float* w, const float* x, int pitch, int64_t hs,
                               int ty, int tx) {
  const float* wr = w + ty * kMicro * kProbPitch;
  for (int i = 0; i < kTile; ++i) {
    float a[kMicro], b[kCols];
    FERRY_UNROLL
    for (int r = 0; r < kMicro; ++r) a[r] = wr[r * kProbPitch + i];
    FERRY_UNROLL
    for (int c = 0; c < kCols; ++c) b[c] = tx + kSide * c < hs ? x[i * pitch + tx + kSide * c] : 0.0f;
    FERRY_UNROLL
    for (int r = 0; r < kMicro; ++r)
      FERRY_UNROLL
      for (int c = 0; c < kCols; ++c) acc[r][c] = fma_f(a[r], b[c], acc[r][c]);
  }
}

template <int kCols>
FERRY_HD void zero(float (&acc)[kMicro][kCols]) {
  FERRY_UNROLL
  for (int r = 0; r < kMicro; ++r)
    FERRY_UNROLL
    for (int c = 0; c < kCols; ++c) acc[r][c] = 0.0f;
}

// dst (a view at (b, row 0, h, 0), rows `stride` apart) += acc (= when not accumulating) on rows
// row0 + ty*4 + r < T, channels < hs.
template <class T, int kCols>
FERRY_HD void write_rows(T* dst, int64_t stride, const float (&acc)[kMicro][kCols], const Geometry& g, int64_t row0,
                         int ty, int tx, bool accumulate) {
  FERRY_UNROLL
  for (int r = 0; r < kMicro; ++r) {
    const int64_t i = row0 + ty * kMicro + r;
    FERRY_UNROLL
    for (int c = 0; c < kCols; ++c) {
      const int64_t ch = tx + kSide * c;
      if (i < g.T && ch < g.hs) store_grad(dst, i * stride + ch, acc[r][c], accumulate);
    }
  }
}

// The 16 lanes of a row (tx = 0..15) combine by an xor butterfly, offsets 8, 4, 2, 1 (the kernel's
// __shfl_xor_sync): lane l takes op(its value, lane l^off's value). Replayed here for all lanes at once.
template <class Op>
FERRY_HD void lane_butterfly(float* v, Op op) {
  for (int off = kSide / 2; off >= 1; off /= 2) {
    float next[kSide];
    for (int l = 0; l < kSide; ++l) next[l] = op(v[l], v[l ^ off]);
    for (int l = 0; l < kSide; ++l) v[l] = next[l];
  }
}

struct MaxOp {
  FERRY_HD float operator()(float a, float b) const { return max_f(a, b); }
};
struct AddOp {
  FERRY_HD float operator()(float a, float b) const { return a + b; }
};

// ---- Forward (one block per query tile): a thread's running softmax state and output for its 4 rows.
template <int kCols>
struct ForwardThread {
  float o[kMicro][kCols];      // unnormalised out: rows ty*4 + r, channels tx + 16 c
  float m[kMicro], l[kMicro];  // running row max (the same in all 16 lanes), this lane's share of the row sum
  float s[kMicro][kMicro];     // this key tile's scores: rows ty*4 + r, keys tx + 16 j
};

template <int kCols>
FERRY_HD void forward_init(ForwardThread<kCols>& th) {
  zero(th.o);
  FERRY_UNROLL
  for (int r = 0; r < kMicro; ++r) th.m[r] = neg_inf(), th.l[r] = 0.0f;
}

// Scores of the micro-tile (-inf where masked) and their row maxima over this lane's keys into mx.
template <int kCols>
FERRY_HD void forward_scores(ForwardThread<kCols>& th, float* mx, const Smem& sm, const Geometry& g, int64_t q0,
                             int64_t k0, int ty, int tx) {
  micro_dots(th.s, sm.q, sm.k, g.pitch, g.hs, ty, tx);
  FERRY_UNROLL
  for (int r = 0; r < kMicro; ++r) {
    mx[r] = neg_inf();
    FERRY_UNROLL
    for (int j = 0; j < kMicro; ++j) {
      const int jk = tx + kSide * j;
      th.s[r][j] = visible(g, q0 + ty * kMicro + r, k0 + jk, sm.key_ok[jk]) ? th.s[r][j] * g.scale : neg_inf();
      mx[r] = max_f(mx[r], th.s[r][j]);
    }
  }
}

// With the rows' maxima over the tile (mx, after the butterfly): the online-softmax step. The new max
// rescales the old sum and output by e^{m_old - m_new}; P goes to shared memory for the P v product.
template <int kCols>
FERRY_HD void forward_probs(ForwardThread<kCols>& th, const float* mx, const Smem& sm, int ty, int tx) {
  FERRY_UNROLL
  for (int r = 0; r < kMicro; ++r) {
    const float m_new = max_f(th.m[r], mx[r]);
    const float alpha = exp_shifted(th.m[r], m_new);
    th.m[r] = m_new;
    float l = th.l[r] * alpha;
    FERRY_UNROLL
    for (int j = 0; j < kMicro; ++j) {
      const float p = exp_shifted(th.s[r][j], m_new);
      sm.p[(ty * kMicro + r) * kProbPitch + tx + kSide * j] = p;
      l = l + p;
    }
    th.l[r] = l;
    FERRY_UNROLL
    for (int c = 0; c < kCols; ++c) th.o[r][c] = th.o[r][c] * alpha;
  }
}

// o += P v over the tile's keys in order.
template <int kCols>
FERRY_HD void forward_accumulate(ForwardThread<kCols>& th, const Smem& sm, const Geometry& g, int ty, int tx) {
  micro_accumulate(th.o, sm.p, sm.v, g.pitch, g.hs, ty, tx);
}

// out = o / l, lse = m + ln l (l: the row's full sum, after the butterfly); a row with no visible key
// (l = 0) gets out 0 and lse -inf. out points at (b, row 0, h, 0) of out, lse at (b, h, 0).
template <class T, int kCols>
FERRY_HD void forward_write(const ForwardThread<kCols>& th, const float* l_row, T* out, float* lse, const Geometry& g,
                            int64_t q0, int ty, int tx) {
  FERRY_UNROLL
  for (int r = 0; r < kMicro; ++r) {
    const int64_t i = q0 + ty * kMicro + r;
    if (i >= g.T) continue;
    const float l = l_row[r];
    const float inv = l > 0.0f ? div_f(1.0f, l) : 0.0f;
    FERRY_UNROLL
    for (int c = 0; c < kCols; ++c) {
      const int64_t ch = tx + kSide * c;
      if (ch < g.hs) store(out, i * g.C + ch, th.o[r][c] * inv);
    }
    if (tx == 0) lse[i] = l > 0.0f ? th.m[r] + log_f(l) : neg_inf();
  }
}

// ---- Backward, D_i = rowsum(dout_i * out_i) over the head's channels in order (one thread per row).
template <class T>
FERRY_HD float row_dot(const T* dout, const T* out, int64_t hs) {
  float acc = 0.0f;
  for (int64_t c = 0; c < hs; ++c) acc = fma_f(load(dout, c), load(out, c), acc);
  return acc;
}

// P and dS of a micro-tile, given its raw dots s = q.k and dp = dout.v, at query iq and key jk of the
// loaded tiles (tile-relative).
struct ProbGrad {
  float p, ds;
};
FERRY_HD inline ProbGrad prob_grad(const Smem& sm, const Geometry& g, int64_t q0, int64_t k0, int iq, int jk, float s,
                                   float dp) {
  if (!visible(g, q0 + iq, k0 + jk, sm.key_ok[jk])) return {0.0f, 0.0f};
  const float p = exp_shifted(s * g.scale, sm.lse[iq]);
  return {p, score_grad(p, dp, sm.d[iq], g.scale)};
}

// dK/dV pass (one block per key tile of a key/value head, over the query heads that read it one after the
// other): the thread's rows are keys ty*4 + r, its columns the tile's queries tx + 16 j. P^T and dS^T go to shared
// memory, row = key.
FERRY_HD inline void key_value_scores(const Smem& sm, const Geometry& g, int64_t q0, int64_t k0, int ty, int tx) {
  float s[kMicro][kMicro], dp[kMicro][kMicro];
  micro_dots(s, sm.k, sm.q, g.pitch, g.hs, ty, tx);
  micro_dots(dp, sm.v, sm.dout, g.pitch, g.hs, ty, tx);
  FERRY_UNROLL
  for (int r = 0; r < kMicro; ++r)
    FERRY_UNROLL
    for (int j = 0; j < kMicro; ++j) {
      const int jk = ty * kMicro + r, iq = tx + kSide * j;
      const ProbGrad pg = prob_grad(sm, g, q0, k0, iq, jk, s[r][j], dp[r][j]);
      sm.p[jk * kProbPitch + iq] = pg.p;
      sm.ds[jk * kProbPitch + iq] = pg.ds;
    }
}

template <int kCols>
struct KeyValueThread {
  float dk[kMicro][kCols], dv[kMicro][kCols];  // rows: keys ty*4 + r; channels tx + 16 c
};

template <int kCols>
FERRY_HD void key_value_init(KeyValueThread<kCols>& th) {
  zero(th.dk), zero(th.dv);
}

// dv += P^T dout, dk += dS^T q over the tile's queries in order.
template <int kCols>
FERRY_HD void key_value_accumulate(KeyValueThread<kCols>& th, const Smem& sm, const Geometry& g, int ty, int tx) {
  micro_accumulate(th.dv, sm.p, sm.dout, g.pitch, g.hs, ty, tx);
  micro_accumulate(th.dk, sm.ds, sm.q, g.pitch, g.hs, ty, tx);
}

// dk, dv (pointing at (b, row 0, kv, 0) of their views) += the accumulators (= when not accumulating: every key
// row of the tile is written, 0 for a masked key).
template <class T, int kCols>
FERRY_HD void key_value_write(const KeyValueThread<kCols>& th, T* dk, T* dv, const Geometry& g, int64_t k0, int ty,
                              int tx, bool accumulate) {
  write_rows(dk, g.krs, th.dk, g, k0, ty, tx, accumulate);
  write_rows(dv, g.krs, th.dv, g, k0, ty, tx, accumulate);
}

// dQ pass (one block per query tile): rows are queries ty*4 + r, columns keys tx + 16 j; dS to shared memory.
FERRY_HD inline void query_scores(const Smem& sm, const Geometry& g, int64_t q0, int64_t k0, int ty, int tx) {
  float s[kMicro][kMicro], dp[kMicro][kMicro];
  micro_dots(s, sm.q, sm.k, g.pitch, g.hs, ty, tx);
  micro_dots(dp, sm.dout, sm.v, g.pitch, g.hs, ty, tx);
  FERRY_UNROLL
  for (int r = 0; r < kMicro; ++r)
    FERRY_UNROLL
    for (int j = 0; j < kMicro; ++j) {
      const int iq = ty * kMicro + r, jk = tx + kSide * j;
      sm.ds[iq * kProbPitch + jk] = prob_grad(sm, g, q0, k0, iq, jk, s[r][j], dp[r][j]).ds;
    }
}

template <int kCols>
struct QueryThread {
  float dq[kMicro][kCols];
};

template <int kCols>
FERRY_HD void query_init(QueryThread<kCols>& th) {
  zero(th.dq);
}

// dq += dS k over the tile's keys in order.
template <int kCols>
FERRY_HD void query_accumulate(QueryThread<kCols>& th, const Smem& sm, const Geometry& g, int ty, int tx) {
  micro_accumulate(th.dq, sm.ds, sm.k, g.pitch, g.hs, ty, tx);
}

template <class T, int kCols>
FERRY_HD void query_write(const QueryThread<kCols>& th, T* dq, const Geometry& g, int64_t q0, int ty, int tx,
                          bool accumulate) {
  write_rows(dq, g.rs, th.dq, g, q0, ty, tx, accumulate);
}

}  // namespace ferry::kernels::cuda::attn

#undef FERRY_UNROLL
