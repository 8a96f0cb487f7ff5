// The row and reduction kernels: LayerNorm and RMSNorm forward/backward, softmax cross-entropy forward/backward, the
// gradients' sum of squares. Bodies in row_ops.h, reduction order in block_reduce.cuh: each kernel must equal
// its host twin (twins.h) bitwise. The row kernels take W columns a thread per 16-byte access (W = 8 bf16/fp16,
// 4 fp32) where row_map_for finds the rows' stride a multiple of W and the operands aligned, else W = 1.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/ops.h"

namespace ferry::kernels::cuda {
namespace {

template <int W, class T>
__global__ void __launch_bounds__(kRowBlock)
    ln_forward_kernel(RowMap m, T* out, float* mean, float* rstd, const T* x, const T* w, const T* b, float eps) {
  const int64_t r = blockIdx.x;
  const int t = static_cast<int>(threadIdx.x);
  const Moments s = block_reduce(ln_forward_fold<W>(m, x, r, t), Moments{0.0f, 0.0f, 0.0f}, MomentsMerge{});
  ln_forward_write<W>(m, out, mean, rstd, x, w, b, r, t, s, eps);
}

template <int W, class T>
__global__ void __launch_bounds__(kRowBlock)
    ln_backward_rows_kernel(RowMap m, T* dx, const T* dout, const T* x, const T* w, const float* mean,
                            const float* rstd, bool accumulate) {
  const int64_t r = blockIdx.x;
  const int t = static_cast<int>(threadIdx.x);
  const SumPair s =
      block_reduce(ln_backward_fold<W>(m, dout, x, w, mean[r], rstd[r], r, t), SumPair{0.0f, 0.0f}, SumPairMerge{});
  ln_backward_write<W>(m, dx, dout, x, w, mean[r], rstd[r], r, t, s, accumulate);
}

template <int W, class T>
__global__ void __launch_bounds__(kRowBlock)
    rms_forward_kernel(RowMap m, T* out, float* rstd, const T* x, const T* w, float eps) {
  const int64_t r = blockIdx.x;
  const int t = static_cast<int>(threadIdx.x);
  const float s = block_reduce(rms_forward_fold<W>(m, x, r, t), 0.0f, SumMerge{});
  rms_forward_write<W>(m, out, rstd, x, w, r, t, s, eps);
}

template <int W, class T>
__global__ void __launch_bounds__(kRowBlock) rms_backward_rows_kernel(RowMap m, T* dx, const T* dout, const T* x,
                                                                      const T* w, const float* rstd, bool accumulate) {
  const int64_t r = blockIdx.x;
  const int t = static_cast<int>(threadIdx.x);
  const float s = block_reduce(rms_backward_fold<W>(m, dout, x, w, rstd[r], r, t), 0.0f, SumMerge{});
  rms_backward_write<W>(m, dx, dout, x, w, rstd[r], r, t, s, accumulate);
}

template <class T>
__global__ void __launch_bounds__(kRowBlock) column_partials_kernel(ColumnMap m, float* pw, float* pb, const T* dout,
                                                                    const T* x, const float* mean, const float* rstd) {
  column_partials(m, pw, pb, dout, x, mean, rstd, blockIdx.x, static_cast<int>(threadIdx.x), blockIdx.y);
}

template <class T>
__global__ void __launch_bounds__(kRowBlock) column_finish_kernel(ColumnMap m, T* dst, const float* partials) {
  column_finish(m, dst, partials, static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x);
}

template <int W, class T>
__global__ void __launch_bounds__(kRowBlock)
    ce_forward_kernel(RowMap m, float* losses, const T* logits, const int32_t* targets) {
  const int64_t r = blockIdx.x;
  const SoftmaxState s =
      block_reduce(ce_fold<W>(m, logits, r, static_cast<int>(threadIdx.x)), softmax_empty(), SoftmaxMerge{});
  if (threadIdx.x == 0) losses[r] = ce_loss(m, logits, targets[r], r, s);
}

template <int W, class T>
__global__ void __launch_bounds__(kRowBlock)
    ce_backward_kernel(RowMap m, T* dlogits, const T* logits, const int32_t* targets, const float* losses, float dloss,
                       const float* dloss_at, bool accumulate) {
  const int64_t r = blockIdx.x;
  const int32_t target = targets[r];
  const int t = static_cast<int>(threadIdx.x);
  if (target < 0) {  // the whole block leaves together: no barrier is skipped by some threads only
    if (!accumulate) ce_zero_columns(m, dlogits, r, t, 0);
    return;
  }
  if (dloss_at) dloss = *dloss_at;  // computed on the device by an earlier kernel
  const float lse = ce_row_lse(m, logits, losses, target, r);
  __syncthreads();  // dlogits may be the logits' memory: logits[r, target] is read by all before any thread writes
  ce_backward_write<W>(m, dlogits, logits, target, dloss, r, t, lse, accumulate);
  if (!accumulate) ce_zero_columns(m, dlogits, r, t, m.cols);
}

template <class T>
__global__ void __launch_bounds__(kElementwiseBlock) squares_pass1_kernel(ElementwiseMap m, SquaresState* partials,
                                                                          const T* g) {
  const SquaresState s = block_reduce(squares_fold(m, g, blockIdx.x, static_cast<int>(threadIdx.x)),
                                      SquaresState{0.0, 0u, 0u}, SquaresMerge{});
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void __launch_bounds__(kRowBlock) squares_pass2_kernel(SquaresResult* out, const SquaresState* partials,
                                                                  int64_t count) {
  const int t = static_cast<int>(threadIdx.x);
  const SquaresState s = block_reduce(squares_fold_partials(partials, count, static_cast<int>(blockDim.x), t),
                                      SquaresState{0.0, 0u, 0u}, SquaresMerge{});
  if (t == 0) *out = {s.sum, s.nonfinite, 0u};
}

bool rows_fit(int64_t rows) { return rows >= 0 && rows <= kMaxGridX; }

unsigned grid_of(int64_t blocks) { return static_cast<unsigned>(blocks); }

}  // namespace

cudaError_t layernorm_forward(void* out, float* mean, float* rstd, const void* x, const void* w, const void* b,
                              int64_t N, int64_t C, float eps, DType dtype, cudaStream_t stream) {
  if (!rows_fit(N)) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  return launched(with_storage(dtype, [&](auto tag) {
    using T = decltype(tag);
    const auto o = static_cast<T*>(out);
    const auto xs = static_cast<const T*>(x), ws = static_cast<const T*>(w), bs = static_cast<const T*>(b);
    const RowMap m = row_map_for<T>(N, C, C, o, xs, ws, bs);
    with_width<T>(m.width, [&](auto width) {
      ln_forward_kernel<decltype(width)::value, T>
          <<<grid_of(m.grid), m.block, 0, stream>>>(m, o, mean, rstd, xs, ws, bs, eps);
    });
  }));
}

int64_t layernorm_backward_scratch_floats(int64_t N, int64_t C) { return 2 * column_map(N, C).chunks * C; }

cudaError_t layernorm_backward(void* dx, void* dw, void* db, const void* dout, const void* x, const void* w,
                               const float* mean, const float* rstd, int64_t N, int64_t C, float* scratch,
                               bool accumulate, DType dtype, cudaStream_t stream) {
  const ColumnMap cm = column_map(N, C);
  if (!rows_fit(N) || cm.chunks > 65535) return cudaErrorInvalidValue;  // grid.y limit
  if (N == 0) return cudaSuccess;
  float* pw = scratch;
  float* pb = scratch + cm.chunks * C;
  return launched(with_storage(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* d = static_cast<const T*>(dout);
    const auto g = static_cast<T*>(dx);
    const auto xs = static_cast<const T*>(x), ws = static_cast<const T*>(w);
    const RowMap m = row_map_for<T>(N, C, C, g, d, xs, ws);
    with_width<T>(m.width, [&](auto width) {
      ln_backward_rows_kernel<decltype(width)::value, T>
          <<<grid_of(m.grid), m.block, 0, stream>>>(m, g, d, xs, ws, mean, rstd, accumulate);
    });
    if (!dw && !db) return;  // a frozen LayerNorm: only dx
    const dim3 grid(grid_of(cm.grid_x), grid_of(cm.chunks));
    column_partials_kernel<T><<<grid, cm.block, 0, stream>>>(cm, pw, pb, d, static_cast<const T*>(x), mean, rstd);
    if (dw) column_finish_kernel<T><<<grid_of(cm.grid_x), cm.block, 0, stream>>>(cm, static_cast<T*>(dw), pw);
    if (db) column_finish_kernel<T><<<grid_of(cm.grid_x), cm.block, 0, stream>>>(cm, static_cast<T*>(db), pb);
  }));
}

cudaError_t rmsnorm_forward(void* out, float* rstd, const void* x, const void* w, int64_t N, int64_t C, float eps,
                            DType dtype, cudaStream_t stream) {
  if (!rows_fit(N)) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  return launched(with_storage(dtype, [&](auto tag) {
    using T = decltype(tag);
    const auto o = static_cast<T*>(out);
    const auto xs = static_cast<const T*>(x), ws = static_cast<const T*>(w);
    const RowMap m = row_map_for<T>(N, C, C, o, xs, ws);
    with_width<T>(m.width, [&](auto width) {
      rms_forward_kernel<decltype(width)::value, T><<<grid_of(m.grid), m.block, 0, stream>>>(m, o, rstd, xs, ws, eps);
    });
  }));
}

int64_t rmsnorm_backward_scratch_floats(int64_t N, int64_t C) { return column_map(N, C).chunks * C; }

// dw's column sums are LayerNorm's partials of dout * xhat with no mean (xhat = x * rstd) and no db.
cudaError_t rmsnorm_backward(void* dx, void* dw, const void* dout, const void* x, const void* w, const float* rstd,
                             int64_t N, int64_t C, float* scratch, bool accumulate, DType dtype, cudaStream_t stream) {
  const ColumnMap cm = column_map(N, C);
  if (!rows_fit(N) || cm.chunks > 65535) return cudaErrorInvalidValue;  // grid.y limit
  if (N == 0) return cudaSuccess;
  return launched(with_storage(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* d = static_cast<const T*>(dout);
    const auto g = static_cast<T*>(dx);
    const auto xs = static_cast<const T*>(x), ws = static_cast<const T*>(w);
    const RowMap m = row_map_for<T>(N, C, C, g, d, xs, ws);
    with_width<T>(m.width, [&](auto width) {
      rms_backward_rows_kernel<decltype(width)::value, T>
          <<<grid_of(m.grid), m.block, 0, stream>>>(m, g, d, xs, ws, rstd, accumulate);
    });
    if (!dw) return;  // a frozen RMSNorm: only dx
    const dim3 grid(grid_of(cm.grid_x), grid_of(cm.chunks));
    column_partials_kernel<T>
        <<<grid, cm.block, 0, stream>>>(cm, scratch, nullptr, d, static_cast<const T*>(x), nullptr, rstd);
    column_finish_kernel<T><<<grid_of(cm.grid_x), cm.block, 0, stream>>>(cm, static_cast<T*>(dw), scratch);
  }));
}

size_t column_sums_scratch_bytes(int64_t rows, int64_t cols) {
  return static_cast<size_t>(column_map(rows, cols).chunks * cols) * sizeof(float);
}

cudaError_t column_sums(void* dst, const void* src, int64_t rows, int64_t cols, void* scratch, DType dtype, cudaStream_t stream) {
  const ColumnMap cm = column_map(rows, cols);
  if (cm.chunks > 65535 || cm.grid_x > kMaxGridX) return cudaErrorInvalidValue;  // grid.y's limit
  if (rows == 0 || cols == 0) return cudaSuccess;
  auto* partials = static_cast<float*>(scratch);
  return launched(with_storage(dtype, [&](auto tag) {
    using T = decltype(tag);
    // LayerNorm's column partials with no x: the plain sums (into its db slot)
    column_partials_kernel<T><<<dim3(grid_of(cm.grid_x), grid_of(cm.chunks)), cm.block, 0, stream>>>(
        cm, nullptr, partials, static_cast<const T*>(src), nullptr, nullptr, nullptr);
    column_finish_kernel<T><<<grid_of(cm.grid_x), cm.block, 0, stream>>>(cm, static_cast<T*>(dst), partials);
  }));
}

cudaError_t cross_entropy_forward(float* losses, const void* logits, const int32_t* targets, int64_t N, int64_t V,
                                  int64_t stride, DType dtype, cudaStream_t stream) {
  if (!rows_fit(N) || stride < V) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  return launched(with_storage(dtype, [&](auto tag) {
    using T = decltype(tag);
    const auto l = static_cast<const T*>(logits);
    const RowMap m = row_map_for<T>(N, V, stride, l);
    with_width<T>(m.width, [&](auto width) {
      ce_forward_kernel<decltype(width)::value, T><<<grid_of(m.grid), m.block, 0, stream>>>(m, losses, l, targets);
    });
  }));
}

namespace {

cudaError_t ce_backward(void* dlogits, const void* logits, const int32_t* targets, const float* losses, float dloss,
                        const float* dloss_at, int64_t N, int64_t V, int64_t stride, bool accumulate, DType dtype,
                        cudaStream_t stream) {
  if (!rows_fit(N) || stride < V) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  return launched(with_storage(dtype, [&](auto tag) {
    using T = decltype(tag);
    const auto d = static_cast<T*>(dlogits);
    const auto l = static_cast<const T*>(logits);
    const RowMap m = row_map_for<T>(N, V, stride, d, l);
    with_width<T>(m.width, [&](auto width) {
      ce_backward_kernel<decltype(width)::value, T>
          <<<grid_of(m.grid), m.block, 0, stream>>>(m, d, l, targets, losses, dloss, dloss_at, accumulate);
    });
  }));
}

}  // namespace

cudaError_t cross_entropy_backward(void* dlogits, const void* logits, const int32_t* targets, const float* losses,
                                   float dloss, int64_t N, int64_t V, int64_t stride, bool accumulate, DType dtype,
                                   cudaStream_t stream) {
  return ce_backward(dlogits, logits, targets, losses, dloss, nullptr, N, V, stride, accumulate, dtype, stream);
}

cudaError_t cross_entropy_backward_from_device(void* dlogits, const void* logits, const int32_t* targets,
                                               const float* losses, const float* dloss, int64_t N, int64_t V,
                                               int64_t stride, bool accumulate, DType dtype, cudaStream_t stream) {
  return ce_backward(dlogits, logits, targets, losses, 0.0f, dloss, N, V, stride, accumulate, dtype, stream);
}

size_t sum_squares_scratch_bytes(int64_t n) {
  return static_cast<size_t>(sum_squares_map(n).pass1.grid) * sizeof(SquaresState);
}

cudaError_t sum_squares(SquaresResult* out, const void* grad, int64_t n, void* scratch, DType grad_type,
                        cudaStream_t stream) {
  static_assert(sizeof(SquaresResult) == sizeof(SquaresState), "the result is the state");
  const SumSquaresMap mp = sum_squares_map(n);
  auto* partials = static_cast<SquaresState*>(scratch);
  return launched(with_storage(grad_type, [&](auto tag) {
    using T = decltype(tag);
    squares_pass1_kernel<T><<<grid_of(mp.pass1.grid), mp.pass1.block, 0, stream>>>(mp.pass1, partials,
                                                                                   static_cast<const T*>(grad));
    squares_pass2_kernel<<<1, mp.block2, 0, stream>>>(out, partials, mp.pass1.grid);
  }));
}

}  // namespace ferry::kernels::cuda
