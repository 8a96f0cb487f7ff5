// The flash attention kernels: forward (out, lse), D = rowsum(dout * out), dK/dV (one block per key tile)
// and dQ (one block per query tile); no float atomics. Bodies in attention_math.h, equal to the host twin
// (attention_twin.h) bitwise. Also attention.h's entry points, which pick this or cuDNN's SDPA.
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/attention_math.h"
#include "kernels/cuda/attention_sdpa_desc.h"
#include "kernels/cuda/block_reduce.cuh"

namespace ferry::kernels::cuda {
namespace {

using namespace attn;

constexpr unsigned kFullWarp = 0xffffffffu;

__device__ void thread_coords(int* t, int* ty, int* tx) {
  *t = static_cast<int>(threadIdx.x);
  *ty = *t / kSide;
  *tx = *t % kSide;
}

// The xor butterfly of lane_butterfly over the 16 lanes of a row (offsets below 16 stay in the half-warp).
template <class Op>
__device__ void row_butterfly(float* v, Op op) {
#pragma unroll
  for (int r = 0; r < kMicro; ++r)
#pragma unroll
    for (int off = kSide / 2; off >= 1; off /= 2) v[r] = op(v[r], __shfl_xor_sync(kFullWarp, v[r], off));
}

template <class T, int kCols>
__global__ void __launch_bounds__(kThreads) forward_kernel(Geometry g, T* out, float* lse, const T* q, const T* k,
                                                           const T* v, const int32_t* key_mask) {
  extern __shared__ float smem[];
  const Smem sm = carve(smem, Pass::Forward, g.pitch);
  const int64_t qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, q0 = qt * kTile;
  int t, ty, tx;
  thread_coords(&t, &ty, &tx);
  const int64_t head = b * g.T * g.rs + h * g.hs, kv = b * g.T * g.krs + kv_head(g, h) * g.hs;
  const int32_t* mask = key_mask ? key_mask + b * g.T : nullptr;
  load_tile(sm.q, g.pitch, q + head, g.rs, q0, g.T, g.hs, t);
  ForwardThread<kCols> th;
  forward_init(th);
  for (int64_t kt = 0; kt < key_tile_end(g, qt); ++kt) {
    const int64_t k0 = kt * kTile;
    __syncthreads();  // the previous tile's readers are done
    load_tile(sm.k, g.pitch, k + kv, g.krs, k0, g.T, g.hs, t);
    load_tile(sm.v, g.pitch, v + kv, g.krs, k0, g.T, g.hs, t);
    load_key_ok(sm.key_ok, mask, k0, g.T, t);
    __syncthreads();
    float mx[kMicro];
    forward_scores(th, mx, sm, g, q0, k0, ty, tx);
    row_butterfly(mx, MaxOp{});
    forward_probs(th, mx, sm, ty, tx);
    __syncthreads();
    forward_accumulate(th, sm, g, ty, tx);
  }
  float l[kMicro];
#pragma unroll
  for (int r = 0; r < kMicro; ++r) l[r] = th.l[r];
  row_butterfly(l, AddOp{});
  forward_write(th, l, out + b * g.T * g.C + h * g.hs, lse + (b * g.NH + h) * g.T, g, q0, ty, tx);
}

// D (B,NH,T): one thread per query row.
template <class T>
__global__ void __launch_bounds__(kThreads) row_dot_kernel(Geometry g, float* d, const T* dout, const T* out) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (n >= g.B * g.NH * g.T) return;
  const int64_t i = n % g.T, bh = n / g.T, h = bh % g.NH, b = bh / g.NH;
  const int64_t e = b * g.T * g.C + i * g.C + h * g.hs;
  d[n] = row_dot(dout + e, out + e, g.hs);
}

// The tiles both backward passes load per (query tile, key tile): q, dout, lse, D of the queries and
// k, v, key_ok of the keys. Pointers are at (b, h).
template <class T>
struct BackwardInputs {
  const T *q, *k, *v, *dout;
  const int32_t* mask;
  const float *lse, *d;
};

template <class T>
__device__ void load_queries(const Smem& sm, const Geometry& g, const BackwardInputs<T>& in, int64_t q0, int t) {
  load_tile(sm.q, g.pitch, in.q, g.rs, q0, g.T, g.hs, t);
  load_tile(sm.dout, g.pitch, in.dout, g.C, q0, g.T, g.hs, t);
  load_query_stats(sm.lse, sm.d, in.lse, in.d, q0, g.T, t);
}

template <class T>
__device__ void load_keys(const Smem& sm, const Geometry& g, const BackwardInputs<T>& in, int64_t k0, int t) {
  load_tile(sm.k, g.pitch, in.k, g.krs, k0, g.T, g.hs, t);
  load_tile(sm.v, g.pitch, in.v, g.krs, k0, g.T, g.hs, t);
  load_key_ok(sm.key_ok, in.mask, k0, g.T, t);
}

template <class T>
__device__ BackwardInputs<T> inputs_at(const Geometry& g, BackwardInputs<T> in, int64_t b, int64_t h) {
  const int64_t head = b * g.T * g.rs + h * g.hs, head_out = b * g.T * g.C + h * g.hs, stats = (b * g.NH + h) * g.T;
  const int64_t kv = b * g.T * g.krs + kv_head(g, h) * g.hs;
  return {in.q + head,    in.k + kv,   in.v + kv, in.dout + head_out, in.mask ? in.mask + b * g.T : nullptr,
          in.lse + stats, in.d + stats};
}

// One block per key tile of key/value head kv: the query heads that read it add up in the accumulators, head
// after head (no two blocks write one dk or dv row).
template <class T, int kCols>
__global__ void __launch_bounds__(kThreads)
    key_value_kernel(Geometry g, T* dk, T* dv, BackwardInputs<T> all, bool accumulate) {
  extern __shared__ float smem[];
  const Smem sm = carve(smem, Pass::KeyValue, g.pitch);
  const int64_t kt = blockIdx.x, kv = blockIdx.y, b = blockIdx.z, k0 = kt * kTile;
  int t, ty, tx;
  thread_coords(&t, &ty, &tx);
  const int64_t h0 = first_query_head(g, kv);
  load_keys(sm, g, inputs_at(g, all, b, h0), k0, t);
  KeyValueThread<kCols> th;
  key_value_init(th);
  for (int64_t h = h0; h < first_query_head(g, kv + 1); ++h) {
    const BackwardInputs<T> in = inputs_at(g, all, b, h);
    for (int64_t qt = query_tile_begin(g, kt); qt < tile_count(g.T); ++qt) {
      __syncthreads();
      load_queries(sm, g, in, qt * kTile, t);
      __syncthreads();
      key_value_scores(sm, g, qt * kTile, k0, ty, tx);
      __syncthreads();
      key_value_accumulate(th, sm, g, ty, tx);
    }
  }
  const int64_t head = b * g.T * g.krs + kv * g.hs;
  key_value_write(th, dk + head, dv + head, g, k0, ty, tx, accumulate);
}

template <class T, int kCols>
__global__ void __launch_bounds__(kThreads) query_kernel(Geometry g, T* dq, BackwardInputs<T> all, bool accumulate) {
  extern __shared__ float smem[];
  const Smem sm = carve(smem, Pass::Query, g.pitch);
  const int64_t qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, q0 = qt * kTile;
  int t, ty, tx;
  thread_coords(&t, &ty, &tx);
  const BackwardInputs<T> in = inputs_at(g, all, b, h);
  load_queries(sm, g, in, q0, t);
  QueryThread<kCols> th;
  query_init(th);
  for (int64_t kt = 0; kt < key_tile_end(g, qt); ++kt) {
    __syncthreads();
    load_keys(sm, g, in, kt * kTile, t);
    __syncthreads();
    query_scores(sm, g, q0, kt * kTile, ty, tx);
    __syncthreads();
    query_accumulate(th, sm, g, ty, tx);
  }
  query_write(th, dq + b * g.T * g.rs + h * g.hs, g, q0, ty, tx, accumulate);
}

// ---- The cuDNN path's helpers.
__global__ void __launch_bounds__(kThreads) seq_lens_kernel(int32_t* seq_q, int32_t* seq_kv, const int32_t* mask,
                                                            int64_t B, int64_t T) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (b >= B) return;
  seq_q[b] = static_cast<int32_t>(T);
  seq_kv[b] = sdpa::keys_before_padding(mask + b * T, T);
}

template <class T>
__global__ void __launch_bounds__(kElementwiseBlock)
    write_view_kernel(ElementwiseMap m, T* dst, const T* src, int64_t C, int64_t row_stride, bool accumulate) {
  for (int64_t k = 0; k < m.per_thread; ++k) {
    const int64_t e = elementwise_index(m, blockIdx.x, static_cast<int>(threadIdx.x), k);
    if (e >= m.n) break;
    store_grad(dst, sdpa::view_index(e, C, row_stride), load(src, e), accumulate);
  }
}

// ---- Host side.
bool valid_shape(const AttentionShape& s) {
  if (s.B < 0 || s.T < 0 || s.NH <= 0 || s.C <= 0 || s.C % s.NH != 0) return false;
  const int64_t hs = s.C / s.NH;
  const int64_t KV = s.kv_heads ? s.kv_heads : s.NH, krs = s.kv_row_stride ? s.kv_row_stride : s.row_stride;
  return hs <= kMaxHeadSize && s.row_stride >= s.C && s.NH <= 65535 && s.B <= 65535 && tile_count(s.T) <= kMaxGridX &&
         KV > 0 && s.NH % KV == 0 && krs >= KV * hs;
}

Geometry geometry(const AttentionShape& s) {
  return make_geometry(s.B, s.T, s.C, s.NH, s.row_stride, s.causal, s.kv_heads, s.kv_row_stride);
}

// Blocks: tiles x heads (the query heads; the key/value heads for the dK/dV pass) x batch rows.
dim3 tile_grid(const Geometry& g, Pass pass) {
  const int64_t heads = pass == Pass::KeyValue ? g.KV : g.NH;
  return dim3(static_cast<unsigned>(tile_count(g.T)), static_cast<unsigned>(heads), static_cast<unsigned>(g.B));
}

// Launches kernel with its dynamic shared memory (over 48 KiB: the opt-in attribute first).
template <class Kernel, class... Args>
cudaError_t launch_tiles(Kernel kernel, const Geometry& g, Pass pass, cudaStream_t stream, Args... args) {
  const size_t bytes = static_cast<size_t>(smem_floats(pass, g.pitch)) * sizeof(float);
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  kernel<<<tile_grid(g, pass), kThreads, bytes, stream>>>(g, args...);
  return cudaGetLastError();
}

template <class T, int kCols>
cudaError_t flash_forward(const Geometry& g, void* out, float* lse, const void* q, const void* k, const void* v,
                          const int32_t* mask, cudaStream_t stream) {
  return launch_tiles(forward_kernel<T, kCols>, g, Pass::Forward, stream, static_cast<T*>(out), lse,
                      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), mask);
}

template <class T, int kCols>
cudaError_t flash_backward(const Geometry& g, void* dq, void* dk, void* dv, const BackwardInputs<T>& in,
                           const void* out, float* d, bool accumulate, cudaStream_t stream) {
  const int64_t rows = g.B * g.NH * g.T;
  row_dot_kernel<T><<<static_cast<unsigned>((rows + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      g, d, in.dout, static_cast<const T*>(out));
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess)
    e = launch_tiles(key_value_kernel<T, kCols>, g, Pass::KeyValue, stream, static_cast<T*>(dk), static_cast<T*>(dv),
                     in, accumulate);
  if (e == cudaSuccess)
    e = launch_tiles(query_kernel<T, kCols>, g, Pass::Query, stream, static_cast<T*>(dq), in, accumulate);
  return e;
}

// Calls f(T{}, std::integral_constant<int, kCols>{}) for the storage type and head size.
template <class F>
cudaError_t with_instance(DType dtype, const Geometry& g, F&& f) {
  cudaError_t e = cudaErrorInvalidValue;
  const bool typed = with_storage(dtype, [&](auto tag) {
    if (cols_for(g.hs) == 4)
      e = f(tag, std::integral_constant<int, 4>{});
    else
      e = f(tag, std::integral_constant<int, 8>{});
  });
  return typed ? e : cudaErrorInvalidValue;
}

}  // namespace

cudaError_t cudnn_seq_lens(int32_t* seq_q, int32_t* seq_kv, const int32_t* key_mask, int64_t B, int64_t T,
                           cudaStream_t stream) {
  if (B <= 0) return cudaSuccess;
  seq_lens_kernel<<<static_cast<unsigned>((B + kThreads - 1) / kThreads), kThreads, 0, stream>>>(seq_q, seq_kv, key_mask,
                                                                                              B, T);
  return cudaGetLastError();
}

cudaError_t write_view(void* dst, const void* src, int64_t B, int64_t T, int64_t C, int64_t row_stride, bool accumulate,
                       DType dtype, cudaStream_t stream) {
  const ElementwiseMap m = elementwise_map(B * T * C);
  if (m.n == 0) return cudaSuccess;
  return launched(with_storage(dtype, [&](auto tag) {
    using S = decltype(tag);
    write_view_kernel<S><<<static_cast<unsigned>(m.grid), m.block, 0, stream>>>(
        m, static_cast<S*>(dst), static_cast<const S*>(src), C, row_stride, accumulate);
  }));
}

bool cudnn_sdpa_available(const AttentionShape& s, DType dtype) {
  const char* force = std::getenv("FERRY_ATTENTION");
  if (force && std::strcmp(force, "flash") == 0) return false;
  return valid_shape(s) && cudnn_sdpa_supports(s, dtype);
}

size_t attention_forward_scratch_bytes(AttentionKernel kernel, const AttentionShape& s, DType dtype) {
  return kernel == AttentionKernel::CudnnSdpa ? cudnn_sdpa_forward_scratch_bytes(s, dtype) : 0;
}

size_t attention_backward_scratch_bytes(AttentionKernel kernel, const AttentionShape& s, DType dtype) {
  if (kernel == AttentionKernel::CudnnSdpa) return cudnn_sdpa_backward_scratch_bytes(s, dtype);
  return static_cast<size_t>(s.B * s.NH * s.T) * sizeof(float);  // D
}

cudaError_t attention_forward(AttentionKernel kernel, void* out, float* lse, const void* q, const void* k,
                              const void* v, const int32_t* key_mask, const AttentionShape& s, DType dtype,
                              void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  if (!valid_shape(s) || scratch_bytes < attention_forward_scratch_bytes(kernel, s, dtype)) return cudaErrorInvalidValue;
  if (s.B == 0 || s.T == 0) return cudaSuccess;
  if (kernel == AttentionKernel::CudnnSdpa)
    return cudnn_sdpa_forward(out, lse, q, k, v, key_mask, s, dtype, scratch, scratch_bytes, stream);
  const Geometry g = geometry(s);
  return with_instance(dtype, g, [&](auto tag, auto cols) {
    return flash_forward<decltype(tag), decltype(cols)::value>(g, out, lse, q, k, v, key_mask, stream);
  });
}

cudaError_t attention_backward(AttentionKernel kernel, void* dq, void* dk, void* dv, const void* dout, const void* q,
                               const void* k, const void* v, const int32_t* key_mask, const void* out, const float* lse,
                               const AttentionShape& s, bool accumulate, DType dtype, void* scratch,
                               size_t scratch_bytes, cudaStream_t stream) {
  if (!valid_shape(s) || scratch_bytes < attention_backward_scratch_bytes(kernel, s, dtype)) return cudaErrorInvalidValue;
  if (s.B == 0 || s.T == 0) return cudaSuccess;
  if (kernel == AttentionKernel::CudnnSdpa)
    return cudnn_sdpa_backward(dq, dk, dv, dout, q, k, v, key_mask, out, lse, s, accumulate, dtype, scratch,
                               scratch_bytes, stream);
  const Geometry g = geometry(s);
  auto* d = static_cast<float*>(scratch);
  return with_instance(dtype, g, [&](auto tag, auto cols) {
    using T = decltype(tag);
    const BackwardInputs<T> in{static_cast<const T*>(q),    static_cast<const T*>(k), static_cast<const T*>(v),
                               static_cast<const T*>(dout), key_mask,                 lse,
                               d};
    return flash_backward<T, decltype(cols)::value>(g, dq, dk, dv, in, out, d, accumulate, stream);
  });
}

}  // namespace ferry::kernels::cuda
