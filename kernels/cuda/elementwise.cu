// The elementwise kernels: embedding forward, GELU, SwiGLU, RoPE and residual forward/backward and the device
// AdamW. One grid-stride map (launch.h) for all; per-element math from math.h, rope_ops.h, adamw.h and
// precision.h.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/rope_ops.h"

namespace ferry::kernels::cuda {
namespace {

// Calls f(i) for every element the thread owns under the map.
template <class F>
__device__ void for_each_element(const ElementwiseMap& m, F&& f) {
  for (int64_t k = 0; k < m.per_thread; ++k) {
    const int64_t i = elementwise_index(m, blockIdx.x, static_cast<int>(threadIdx.x), k);
    if (i >= m.n) return;
    f(i);
  }
}

template <class T>
__global__ void __launch_bounds__(kElementwiseBlock) embedding_forward_kernel(ElementwiseMap m, T* out,
                                                                              const int32_t* tokens, const T* wte,
                                                                              const T* wpe, const T* type, int64_t T_,
                                                                              int64_t C) {
  for_each_element(m, [&](int64_t e) {
    const int64_t r = e / C, c = e % C;
    float v = load(wte, static_cast<int64_t>(tokens[r]) * C + c);
    if (type) v = v + load(type, c);
    store(out, e, wpe ? v + load(wpe, (r % T_) * C + c) : v);  // no position table: Llama's rotary positions
  });
}

template <class T>
__global__ void __launch_bounds__(kElementwiseBlock) gelu_forward_kernel(ElementwiseMap m, T* out, const T* x,
                                                                         bool exact) {
  for_each_element(m, [&](int64_t i) { store(out, i, gelu_forward_f(load(x, i), exact)); });
}

template <class T>
__global__ void __launch_bounds__(kElementwiseBlock)
    gelu_backward_kernel(ElementwiseMap m, T* dx, const T* dout, const T* x, bool exact, bool accumulate) {
  for_each_element(
      m, [&](int64_t i) { store_grad(dx, i, load(dout, i) * gelu_backward_f(load(x, i), exact), accumulate); });
}

template <class T>
__global__ void __launch_bounds__(kElementwiseBlock)
    swiglu_forward_kernel(ElementwiseMap m, T* out, const T* gate, const T* up) {
  for_each_element(m, [&](int64_t i) { store(out, i, swiglu_forward_f(load(gate, i), load(up, i))); });
}

template <class T>
__global__ void __launch_bounds__(kElementwiseBlock)
    swiglu_backward_kernel(ElementwiseMap m, T* dgate, T* dup, const T* dout, const T* gate, const T* up,
                           bool accumulate) {
  for_each_element(m, [&](int64_t i) {
    const SwiGluGrads g = swiglu_backward_f(load(gate, i), load(up, i), load(dout, i));
    store_grad(dgate, i, g.dgate, accumulate);
    store_grad(dup, i, g.dup, accumulate);
  });
}

// One thread per rotated pair; sign -1 for backward, which also accumulates unless told to write.
template <class T>
__global__ void __launch_bounds__(kElementwiseBlock)
    rope_kernel(ElementwiseMap m, RopeArgs a, T* out, const T* x, float sign, bool accumulate) {
  for_each_element(m, [&](int64_t e) { rope_pair(a, out, x, e, sign, accumulate); });
}

template <class T>
__global__ void __launch_bounds__(kElementwiseBlock) residual_forward_kernel(ElementwiseMap m, T* out, const T* a,
                                                                             const T* b) {
  for_each_element(m, [&](int64_t i) { store(out, i, load(a, i) + load(b, i)); });
}

template <class T>
__global__ void __launch_bounds__(kElementwiseBlock)
    residual_backward_kernel(ElementwiseMap m, T* da, T* db, const T* dout, bool accumulate) {
  for_each_element(m, [&](int64_t i) {
    const float d = load(dout, i);
    store_grad(da, i, d, accumulate);
    store_grad(db, i, d, accumulate);
  });
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
  const ElementwiseMap m = elementwise_map(B * T * C);
  return launched(with_storage(dtype, [&](auto tag) {
    using S = decltype(tag);
    embedding_forward_kernel<S><<<grid_of(m), m.block, 0, stream>>>(m, static_cast<S*>(out), tokens,
                                                                    static_cast<const S*>(wte),
                                                                    static_cast<const S*>(wpe),
                                                                    static_cast<const S*>(type), T, C);
  }));
}

cudaError_t gelu_forward(void* out, const void* x, int64_t N, bool exact, DType dtype, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  const ElementwiseMap m = elementwise_map(N);
  return launched(with_storage(dtype, [&](auto tag) {
    using S = decltype(tag);
    gelu_forward_kernel<S><<<grid_of(m), m.block, 0, stream>>>(m, static_cast<S*>(out), static_cast<const S*>(x), exact);
  }));
}

cudaError_t gelu_backward(void* dx, const void* dout, const void* x, int64_t N, bool exact, bool accumulate,
                          DType dtype, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  const ElementwiseMap m = elementwise_map(N);
  return launched(with_storage(dtype, [&](auto tag) {
    using S = decltype(tag);
    gelu_backward_kernel<S><<<grid_of(m), m.block, 0, stream>>>(m, static_cast<S*>(dx), static_cast<const S*>(dout),
                                                                static_cast<const S*>(x), exact, accumulate);
  }));
}

cudaError_t swiglu_forward(void* out, const void* gate, const void* up, int64_t N, DType dtype, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  const ElementwiseMap m = elementwise_map(N);
  return launched(with_storage(dtype, [&](auto tag) {
    using S = decltype(tag);
    swiglu_forward_kernel<S><<<grid_of(m), m.block, 0, stream>>>(m, static_cast<S*>(out), static_cast<const S*>(gate),
                                                                 static_cast<const S*>(up));
  }));
}

cudaError_t swiglu_backward(void* dgate, void* dup, const void* dout, const void* gate, const void* up, int64_t N,
                            bool accumulate, DType dtype, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  const ElementwiseMap m = elementwise_map(N);
  return launched(with_storage(dtype, [&](auto tag) {
    using S = decltype(tag);
    swiglu_backward_kernel<S><<<grid_of(m), m.block, 0, stream>>>(
        m, static_cast<S*>(dgate), static_cast<S*>(dup), static_cast<const S*>(dout), static_cast<const S*>(gate),
        static_cast<const S*>(up), accumulate);
  }));
}

namespace {

cudaError_t rope(void* out, const void* x, int64_t B, int64_t T, int64_t H, int64_t hs, int64_t row_stride,
                 const RopeScaling& scaling, float sign, bool accumulate, DType dtype, cudaStream_t stream) {
  RopeArgs a;
  if (!rope_args(&a, B, T, H, hs, row_stride, scaling)) return cudaErrorInvalidValue;
  if (rope_pairs(a) == 0) return cudaSuccess;
  const ElementwiseMap m = elementwise_map(rope_pairs(a));
  return launched(with_storage(dtype, [&](auto tag) {
    using S = decltype(tag);
    rope_kernel<S>
        <<<grid_of(m), m.block, 0, stream>>>(m, a, static_cast<S*>(out), static_cast<const S*>(x), sign, accumulate);
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
  const ElementwiseMap m = elementwise_map(N);
  return launched(with_storage(dtype, [&](auto tag) {
    using S = decltype(tag);
    residual_forward_kernel<S><<<grid_of(m), m.block, 0, stream>>>(m, static_cast<S*>(out), static_cast<const S*>(a),
                                                                   static_cast<const S*>(b));
  }));
}

cudaError_t residual_backward(void* da, void* db, const void* dout, int64_t N, bool accumulate, DType dtype,
                              cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  const ElementwiseMap m = elementwise_map(N);
  return launched(with_storage(dtype, [&](auto tag) {
    using S = decltype(tag);
    residual_backward_kernel<S><<<grid_of(m), m.block, 0, stream>>>(m, static_cast<S*>(da), static_cast<S*>(db),
                                                                    static_cast<const S*>(dout), accumulate);
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
