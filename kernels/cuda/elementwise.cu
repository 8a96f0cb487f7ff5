// The elementwise kernels: embedding forward, GELU, SwiGLU, RoPE and residual forward/backward and the device
// AdamW. One grid-stride map (launch.h) for all; the bodies over a pack of W elements in elementwise_ops.h (W = 8
// bf16/fp16 or 4 fp32 per 16-byte access where the launch function finds the operands aligned and n a multiple
// of W, else 1); per-element math from math.h, rope_ops.h, adamw.h and precision.h.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/elementwise_ops.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/rope_ops.h"

namespace ferry::kernels::cuda {
namespace {

// Calls f(i) for the first element i of every pack of W the thread owns under the map, in index type I (int32
// where the launch function found every index to fit: cheaper loop and address math than int64).
template <int W, class I, class F>
__device__ void for_each_pack(const ElementwiseMap& m, F&& f) {
  const I packs = static_cast<I>(map_packs(m));
  const I trips = static_cast<I>(m.per_thread);
  for (I k = 0; k < trips; ++k) {
    const I p = pack_index<I>(m, blockIdx.x, threadIdx.x, k);
    if (p >= packs) return;
    f(p * W);
  }
}

// Calls f(i) for every element index i of the map, in 64-bit (AdamW: fp32 state, always the scalar path).
template <class F>
__device__ void for_each_element(const ElementwiseMap& m, F&& f) {
  for (int64_t k = 0; k < m.per_thread; ++k) {
    const int64_t i = elementwise_index(m, blockIdx.x, static_cast<int>(threadIdx.x), k);
    if (i >= m.n) return;
    f(i);
  }
}

template <int W, class I, class T>
__global__ void __launch_bounds__(kElementwiseBlock)
    embedding_forward_kernel(ElementwiseMap m, T* out, const int32_t* tokens, const T* wte, const T* wpe, const T* type,
                             int64_t T_, int64_t C) {
  for_each_pack<W, I>(m, [&](I i) { embedding_forward_pack<W>(out, tokens, wte, wpe, type, T_, C, i); });
}

template <int W, class I, class T>
__global__ void __launch_bounds__(kElementwiseBlock)
    gelu_forward_kernel(ElementwiseMap m, T* out, const T* x, bool exact) {
  for_each_pack<W, I>(m, [&](I i) { gelu_forward_pack<W>(out, x, i, exact); });
}

template <int W, class I, class T>
__global__ void __launch_bounds__(kElementwiseBlock)
    gelu_backward_kernel(ElementwiseMap m, T* dx, const T* dout, const T* x, bool exact, bool accumulate) {
  for_each_pack<W, I>(m, [&](I i) { gelu_backward_pack<W>(dx, dout, x, i, exact, accumulate); });
}

template <int W, class I, class T>
__global__ void __launch_bounds__(kElementwiseBlock)
    swiglu_forward_kernel(ElementwiseMap m, T* out, const T* gate, const T* up) {
  for_each_pack<W, I>(m, [&](I i) { swiglu_forward_pack<W>(out, gate, up, i); });
}

template <int W, class I, class T>
__global__ void __launch_bounds__(kElementwiseBlock)
    swiglu_backward_kernel(ElementwiseMap m, T* dgate, T* dup, const T* dout, const T* gate, const T* up,
                           bool accumulate) {
  for_each_pack<W, I>(m, [&](I i) { swiglu_backward_pack<W>(dgate, dup, dout, gate, up, i, accumulate); });
}

// One thread per pack of rotated pairs; sign -1 for backward, which also accumulates unless told to write.
template <int W, class I, class T>
__global__ void __launch_bounds__(kElementwiseBlock)
    rope_kernel(ElementwiseMap m, RopeArgs a, T* out, const T* x, float sign, bool accumulate) {
  for_each_pack<W, I>(m, [&](I e) { rope_pack<W>(a, out, x, e, sign, accumulate); });
}

template <int W, class I, class T>
__global__ void __launch_bounds__(kElementwiseBlock)
    residual_forward_kernel(ElementwiseMap m, T* out, const T* a, const T* b) {
  for_each_pack<W, I>(m, [&](I i) { residual_forward_pack<W>(out, a, b, i); });
}

template <int W, class I, class T>
__global__ void __launch_bounds__(kElementwiseBlock)
    residual_backward_kernel(ElementwiseMap m, T* da, T* db, const T* dout, bool accumulate) {
  for_each_pack<W, I>(m, [&](I i) { residual_backward_pack<W>(da, db, dout, i, accumulate); });
}

// The working copy, as cpu_optim's store_upload writes it (stochastic rounding for bf16 only).
__device__ void store_weight(void* w, DType type, bool stochastic, uint32_t key, int64_t i, float p) {
  switch (type) {
    case DType::F32: static_cast<float*>(w)[i] = p; break;
    case DType::F16: static_cast<uint16_t*>(w)[i] = float_to_half(p); break;
    case DType::BF16:
      static_cast<uint16_t*>(w)[i] = stochastic ? float_to_bf16_stochastic(p, random_bits(key, static_cast<uint32_t>(i)))
                                                : float_to_bf16(p);
      break;
    case DType::I32: break;
  }
}

template <class G>
__global__ void __launch_bounds__(kElementwiseBlock)
    adamw_kernel(ElementwiseMap m, float* master, float* mom, float* var, const G* grad, void* weights,
                 DType weight_type, bool stochastic, kernels::AdamWCoefficients c, const AdamWGate* gate) {
  if (gate) {  // the decision made on the device
    if (gate->skip) return;
    c.grad_scale = gate->grad_scale;
  }
  for_each_element(m, [&](int64_t i) {
    float p = master[i], mi = mom[i], vi = var[i];
    kernels::adamw_element(p, mi, vi, load(grad, i), c);
    master[i] = p, mom[i] = mi, var[i] = vi;
    if (weights) store_weight(weights, weight_type, stochastic, c.random_key, i, p);
  });
}

unsigned grid_of(const ElementwiseMap& m) { return static_cast<unsigned>(m.grid); }

}  // namespace

cudaError_t embedding_forward(void* out, const int32_t* tokens, const void* wte, const void* wpe, const void* type,
                              int64_t B, int64_t T, int64_t C, DType dtype, cudaStream_t stream) {
  if (B * T * C == 0) return cudaSuccess;
  return launched(with_storage(dtype, [&](auto tag) {
    using S = decltype(tag);
    const auto o = static_cast<S*>(out);
    const auto e = static_cast<const S*>(wte), p = static_cast<const S*>(wpe), ty = static_cast<const S*>(type);
    const ElementwiseMap m = embedding_forward_map(o, e, p, ty, B * T * C, C);
    with_path<S>(m, [&](auto w, auto index) {
      embedding_forward_kernel<decltype(w)::value, decltype(index)>
          <<<grid_of(m), m.block, 0, stream>>>(m, o, tokens, e, p, ty, T, C);
    });
  }));
}

cudaError_t gelu_forward(void* out, const void* x, int64_t N, bool exact, DType dtype, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  return launched(with_storage(dtype, [&](auto tag) {
    using S = decltype(tag);
    const auto o = static_cast<S*>(out);
    const auto xs = static_cast<const S*>(x);
    const ElementwiseMap m = elementwise_map_for<S>(N, o, xs);
    with_path<S>(m, [&](auto w, auto index) {
      gelu_forward_kernel<decltype(w)::value, decltype(index)><<<grid_of(m), m.block, 0, stream>>>(m, o, xs, exact);
    });
  }));
}

cudaError_t gelu_backward(void* dx, const void* dout, const void* x, int64_t N, bool exact, bool accumulate,
                          DType dtype, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  return launched(with_storage(dtype, [&](auto tag) {
    using S = decltype(tag);
    const auto d = static_cast<S*>(dx);
    const auto g = static_cast<const S*>(dout), xs = static_cast<const S*>(x);
    const ElementwiseMap m = elementwise_map_for<S>(N, d, g, xs);
    with_path<S>(m, [&](auto w, auto index) {
      gelu_backward_kernel<decltype(w)::value, decltype(index)>
          <<<grid_of(m), m.block, 0, stream>>>(m, d, g, xs, exact, accumulate);
    });
  }));
}

cudaError_t swiglu_forward(void* out, const void* gate, const void* up, int64_t N, DType dtype, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  return launched(with_storage(dtype, [&](auto tag) {
    using S = decltype(tag);
    const auto o = static_cast<S*>(out);
    const auto g = static_cast<const S*>(gate), u = static_cast<const S*>(up);
    const ElementwiseMap m = elementwise_map_for<S>(N, o, g, u);
    with_path<S>(m, [&](auto w, auto index) {
      swiglu_forward_kernel<decltype(w)::value, decltype(index)><<<grid_of(m), m.block, 0, stream>>>(m, o, g, u);
    });
  }));
}

cudaError_t swiglu_backward(void* dgate, void* dup, const void* dout, const void* gate, const void* up, int64_t N,
                            bool accumulate, DType dtype, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  return launched(with_storage(dtype, [&](auto tag) {
    using S = decltype(tag);
    const auto dg = static_cast<S*>(dgate), du = static_cast<S*>(dup);
    const auto d = static_cast<const S*>(dout), g = static_cast<const S*>(gate), u = static_cast<const S*>(up);
    const ElementwiseMap m = elementwise_map_for<S>(N, dg, du, d, g, u);
    with_path<S>(m, [&](auto w, auto index) {
      swiglu_backward_kernel<decltype(w)::value, decltype(index)>
          <<<grid_of(m), m.block, 0, stream>>>(m, dg, du, d, g, u, accumulate);
    });
  }));
}

namespace {

cudaError_t rope(void* out, const void* x, int64_t B, int64_t T, int64_t H, int64_t hs, int64_t row_stride,
                 const RopeScaling& scaling, float sign, bool accumulate, DType dtype, cudaStream_t stream) {
  RopeArgs a;
  if (!rope_args(&a, B, T, H, hs, row_stride, scaling)) return cudaErrorInvalidValue;
  if (rope_pairs(a) == 0) return cudaSuccess;
  return launched(with_storage(dtype, [&](auto tag) {
    using S = decltype(tag);
    const auto o = static_cast<S*>(out);
    const auto xs = static_cast<const S*>(x);
    const ElementwiseMap m = rope_map(a, o, xs);
    with_path<S>(m, [&](auto w, auto index) {
      rope_kernel<decltype(w)::value, decltype(index)>
          <<<grid_of(m), m.block, 0, stream>>>(m, a, o, xs, sign, accumulate);
    });
  }));
}

}  // namespace

cudaError_t rope_forward(void* out, const void* x, int64_t B, int64_t T, int64_t H, int64_t hs, int64_t row_stride,
                         const RopeScaling& scaling, DType dtype, cudaStream_t stream) {
  return rope(out, x, B, T, H, hs, row_stride, scaling, 1.0f, false, dtype, stream);
}

cudaError_t rope_backward(void* dx, const void* dout, int64_t B, int64_t T, int64_t H, int64_t hs, int64_t row_stride,
                          const RopeScaling& scaling, bool accumulate, DType dtype, cudaStream_t stream) {
  return rope(dx, dout, B, T, H, hs, row_stride, scaling, -1.0f, accumulate, dtype, stream);
}

cudaError_t residual_forward(void* out, const void* a, const void* b, int64_t N, DType dtype, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  return launched(with_storage(dtype, [&](auto tag) {
    using S = decltype(tag);
    const auto o = static_cast<S*>(out);
    const auto x = static_cast<const S*>(a), y = static_cast<const S*>(b);
    const ElementwiseMap m = elementwise_map_for<S>(N, o, x, y);
    with_path<S>(m, [&](auto w, auto index) {
      residual_forward_kernel<decltype(w)::value, decltype(index)><<<grid_of(m), m.block, 0, stream>>>(m, o, x, y);
    });
  }));
}

cudaError_t residual_backward(void* da, void* db, const void* dout, int64_t N, bool accumulate, DType dtype,
                              cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  return launched(with_storage(dtype, [&](auto tag) {
    using S = decltype(tag);
    const auto x = static_cast<S*>(da), y = static_cast<S*>(db);
    const auto d = static_cast<const S*>(dout);
    const ElementwiseMap m = elementwise_map_for<S>(N, x, y, d);
    with_path<S>(m, [&](auto w, auto index) {
      residual_backward_kernel<decltype(w)::value, decltype(index)>
          <<<grid_of(m), m.block, 0, stream>>>(m, x, y, d, accumulate);
    });
  }));
}

cudaError_t adamw(float* master, float* m, float* v, const void* grad, DType grad_type, void* weights,
                  DType weight_type, bool stochastic, int64_t n, const kernels::AdamWCoefficients& c,
                  cudaStream_t stream) {
  return adamw_gated(master, m, v, grad, grad_type, weights, weight_type, stochastic, n, c, nullptr, stream);
}

cudaError_t adamw_gated(float* master, float* m, float* v, const void* grad, DType grad_type, void* weights,
                        DType weight_type, bool stochastic, int64_t n, const kernels::AdamWCoefficients& c,
                        const AdamWGate* gate, cudaStream_t stream) {
  if (weights && weight_type == DType::I32) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const ElementwiseMap map = elementwise_map(n);
  return launched(with_storage(grad_type, [&](auto tag) {
    using G = decltype(tag);
    adamw_kernel<G><<<grid_of(map), map.block, 0, stream>>>(map, master, m, v, static_cast<const G*>(grad), weights,
                                                            weight_type, stochastic, c, gate);
  }));
}

}  // namespace ferry::kernels::cuda
