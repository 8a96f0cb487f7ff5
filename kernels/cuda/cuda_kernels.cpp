// CudaKernels: each argument struct of the dispatcher onto a launch function of kernels/cuda, on the bound
// stream, scratch from the bound workspace; the loss's mean and the loss gradient's 1/count computed on the
// device (target_sums.h), so nothing in a step waits for the host or the host for the stream. Host code (C++20:
// the dispatcher's headers), compiled by the host compiler.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cublaslt_library.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/target_sums.h"

namespace ferry::kernels::cuda {
namespace {

void check(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // a launch error is not sticky: clear it for the next op
  throw std::runtime_error(what + ": " + cudaGetErrorString(e));
}

void check(cublasStatus_t s, const std::string& what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(what + ": cuBLASLt " + cublaslt().status_string(s));
}

void* ptr(kernels::Operand o) { return o.data; }
template <class T>
T* as(kernels::Operand o) {
  return reinterpret_cast<T*>(o.data);
}
const int32_t* ids(kernels::Operand o) { return as<const int32_t>(o); }

std::string shape_of(const AttentionShape& s, DType dtype) {
  return fmt::format("B={} T={} C={} heads={} row_stride={} kv_heads={} kv_row_stride={} {} {}", s.B, s.T, s.C, s.NH,
                     s.row_stride, s.kv_heads, s.kv_row_stride, s.causal ? "causal" : "bidirectional",
                     to_string(dtype));
}

// An invalid value from the rope kernel is its head size (odd, or past 512): name it.
std::string rope_what(const char* pass, const kernels::RopeDims& d) {
  return fmt::format("cuda::rope_{} (B={} T={} heads={} head_size={}: the head size must be even and at most 512)",
                     pass, d.batch, d.seq, d.heads, d.head_size);
}

std::string linear_shape(int64_t rows, int64_t in, int64_t out) { return fmt::format("({} x {} -> {})", rows, in, out); }

}  // namespace

AttentionShape attention_shape(const AttentionDims& d) {
  return {d.batch, d.seq, d.channels, d.heads, d.row_stride, d.causal, d.kv_heads, d.kv_row_stride};
}

AttentionKernel choose_attention_kernel(const AttentionShape& s, DType dtype) {
  return cudnn_sdpa_available(s, dtype) ? AttentionKernel::CudnnSdpa : AttentionKernel::Flash;
}

void CudaKernels::bind(cudaStream_t stream, std::byte* workspace, int64_t workspace_bytes, float* loss_mean) {
  stream_ = stream, workspace_ = workspace, workspace_bytes_ = workspace ? workspace_bytes : 0, loss_mean_ = loss_mean;
}

std::byte* CudaKernels::scratch(int64_t bytes, const char* what) const {
  if (bytes > workspace_bytes_)
    throw std::runtime_error(fmt::format("{} needs {} bytes of scratch; the bound workspace holds {} (the plan sizes it by "
                                         "Device::op_workspace_bytes: bind one at least that large)",
                                         what, bytes, workspace_bytes_));
  return workspace_;
}

LtMatmuls& CudaKernels::lt() {
  if (!lt_) lt_ = std::make_unique<LtMatmuls>();
  return *lt_;
}

AttentionKernel CudaKernels::attention_kernel(const AttentionShape& s, DType dtype) {
  const auto key = std::make_tuple(s.B, s.T, s.C, s.NH, s.row_stride, s.causal, dtype, s.kv_heads, s.kv_row_stride);
  auto found = attention_kernels_.find(key);
  if (found == attention_kernels_.end()) found = attention_kernels_.emplace(key, choose_attention_kernel(s, dtype)).first;
  return found->second;
}

void CudaKernels::zero(kernels::Operand tensor, int64_t bytes) {
  check(cudaMemsetAsync(tensor.data, 0, static_cast<size_t>(bytes), stream_), fmt::format("zeroing {} bytes", bytes));
}

void CudaKernels::embedding_forward(const kernels::EmbeddingForward& a) {
  check(cuda::embedding_forward(ptr(a.out), ids(a.tokens), ptr(a.wte), ptr(a.wpe), ptr(a.type), a.batch, a.seq, a.channels,
                                a.out.dtype, stream_),
        "cuda::embedding_forward");
}

void CudaKernels::embedding_backward(const kernels::EmbeddingBackward& a) {
  std::byte* s = scratch(static_cast<int64_t>(embedding_backward_scratch_bytes(a.batch, a.seq, a.channels)), "embedding backward");
  // The vocabulary only bounds the radix sort's key bits; the dispatcher does not pass it, so every id bit is
  // sorted (2^31: one more pass or two over B*T ids, nothing next to the rows' sums).
  constexpr int64_t kAnyId = int64_t{1} << 31;
  check(cuda::embedding_backward(ptr(a.dwte), ptr(a.dwpe), ptr(a.dtype), ptr(a.dout), ids(a.tokens), a.batch, a.seq,
                                 a.channels, kAnyId, s, a.dout.dtype, stream_),
        "cuda::embedding_backward");
}

void CudaKernels::layernorm_forward(const kernels::LayerNormForward& a) {
  check(cuda::layernorm_forward(ptr(a.out), as<float>(a.mean), as<float>(a.rstd), ptr(a.x), ptr(a.w), ptr(a.b), a.rows,
                                a.channels, a.eps, a.x.dtype, stream_),
        "cuda::layernorm_forward");
}

void CudaKernels::layernorm_backward(const kernels::LayerNormBackward& a) {
  auto* s = reinterpret_cast<float*>(
      scratch(layernorm_backward_scratch_floats(a.rows, a.channels) * int64_t{sizeof(float)}, "layernorm backward"));
  check(cuda::layernorm_backward(ptr(a.dx), ptr(a.dw), ptr(a.db), ptr(a.dout), ptr(a.x), ptr(a.w), as<float>(a.mean),
                                 as<float>(a.rstd), a.rows, a.channels, s, a.accumulate, a.x.dtype, stream_),
        "cuda::layernorm_backward");
}

void CudaKernels::linear_forward(const kernels::LinearForward& a) {
  const LinearShape shape{a.rows, a.in, a.out_features, a.weight_out_in};
  const size_t ws = static_cast<size_t>(std::min(workspace_bytes_, kLtWorkspaceBytes));
  check(lt().run(linear_forward_desc(shape, a.bias.data != nullptr), ptr(a.out), ptr(a.x), ptr(a.w), ptr(a.bias),
                 a.x.dtype, workspace_, ws, stream_),
        "linear forward " + linear_shape(a.rows, a.in, a.out_features));
}

// dx += dy W^T (beta 1; beta 0, written, when not accumulating), dW += x^T dy (beta 1 always), dbias += column
// sums of dy: one after the other on the stream, each with the whole workspace.
void CudaKernels::linear_backward(const kernels::LinearBackward& a) {
  const LinearShape shape{a.rows, a.in, a.out_features, a.weight_out_in};
  const DType t = a.dout.dtype;
  const size_t ws = static_cast<size_t>(std::min(workspace_bytes_, kLtWorkspaceBytes));
  const std::string what = "linear backward " + linear_shape(a.rows, a.in, a.out_features);
  if (a.dx.data)
    check(lt().run(linear_dx_desc(shape, a.accumulate), ptr(a.dx), ptr(a.dout), ptr(a.w), nullptr, t, workspace_, ws,
                   stream_),
          what + ": dx");
  const void* dw_a = a.weight_out_in ? ptr(a.dout) : ptr(a.x);
  const void* dw_b = a.weight_out_in ? ptr(a.x) : ptr(a.dout);
  if (a.dw.data)
    check(lt().run(linear_dw_desc(shape), ptr(a.dw), dw_a, dw_b, nullptr, t, workspace_, ws, stream_), what + ": dW");
  if (!a.dbias.data) return;
  std::byte* s = scratch(static_cast<int64_t>(column_sums_scratch_bytes(a.rows, a.out_features)), "linear dbias");
  check(column_sums(ptr(a.dbias), ptr(a.dout), a.rows, a.out_features, s, t, stream_), what + ": dbias");
}

// The log-sum-exp (B,NH,T) fp32 lives where the op's probabilities would (the plan sizes that tensor for it when
// its cost model says fused_attention; a full (B,NH,T,T) tensor holds it too).
void CudaKernels::attention_forward(const kernels::AttentionForward& a) {
  const AttentionShape s = attention_shape(a.dims);
  const DType t = a.out.dtype;
  const AttentionKernel kernel = attention_kernel(s, t);
  const auto bytes = static_cast<int64_t>(attention_forward_scratch_bytes(kernel, s, t));
  std::byte* ws = scratch(bytes, "attention forward");
  check(cuda::attention_forward(kernel, ptr(a.out), as<float>(a.probs), ptr(a.q), ptr(a.k), ptr(a.v), ids(a.key_mask), s, t,
                                ws, static_cast<size_t>(bytes), stream_),
        "cuda::attention_forward (" + shape_of(s, t) + ")");
}

void CudaKernels::attention_backward(const kernels::AttentionBackward& a) {
  const AttentionShape s = attention_shape(a.dims);
  const DType t = a.dout.dtype;
  const AttentionKernel kernel = attention_kernel(s, t);
  const auto bytes = static_cast<int64_t>(attention_backward_scratch_bytes(kernel, s, t));
  std::byte* ws = scratch(bytes, "attention backward");
  check(cuda::attention_backward(kernel, ptr(a.dq), ptr(a.dk), ptr(a.dv), ptr(a.dout), ptr(a.q), ptr(a.k), ptr(a.v),
                                 ids(a.key_mask), ptr(a.y), as<const float>(a.probs), s, a.accumulate, t, ws,
                                 static_cast<size_t>(bytes), stream_),
        "cuda::attention_backward (" + shape_of(s, t) + ")");
}

void CudaKernels::gelu_forward(const kernels::GeluForward& a) {
  check(cuda::gelu_forward(ptr(a.out), ptr(a.x), a.n, a.exact, a.x.dtype, stream_), "cuda::gelu_forward");
}
void CudaKernels::gelu_backward(const kernels::GeluBackward& a) {
  check(cuda::gelu_backward(ptr(a.dx), ptr(a.dout), ptr(a.x), a.n, a.exact, a.accumulate, a.x.dtype, stream_),
        "cuda::gelu_backward");
}

void CudaKernels::rmsnorm_forward(const kernels::RmsNormForward& a) {
  check(cuda::rmsnorm_forward(ptr(a.out), as<float>(a.rstd), ptr(a.x), ptr(a.w), a.rows, a.channels, a.eps, a.x.dtype,
                              stream_),
        "cuda::rmsnorm_forward");
}

void CudaKernels::rmsnorm_backward(const kernels::RmsNormBackward& a) {
  const int64_t floats = a.dw.data ? rmsnorm_backward_scratch_floats(a.rows, a.channels) : 0;
  auto* s = reinterpret_cast<float*>(scratch(floats * int64_t{sizeof(float)}, "rmsnorm backward"));
  check(cuda::rmsnorm_backward(ptr(a.dx), ptr(a.dw), ptr(a.dout), ptr(a.x), ptr(a.w), as<float>(a.rstd), a.rows,
                               a.channels, s, a.accumulate, a.x.dtype, stream_),
        "cuda::rmsnorm_backward");
}

void CudaKernels::rope_forward(const kernels::RopeForward& a) {
  const kernels::RopeDims& d = a.dims;
  check(cuda::rope_forward(ptr(a.out), ptr(a.x), d.batch, d.seq, d.heads, d.head_size, d.row_stride, d.scaling,
                           a.x.dtype, stream_),
        rope_what("forward", d));
}

void CudaKernels::rope_backward(const kernels::RopeBackward& a) {
  const kernels::RopeDims& d = a.dims;
  check(cuda::rope_backward(ptr(a.dx), ptr(a.dout), d.batch, d.seq, d.heads, d.head_size, d.row_stride, d.scaling,
                            a.accumulate, a.dout.dtype, stream_),
        rope_what("backward", d));
}

void CudaKernels::swiglu_forward(const kernels::SwiGluForward& a) {
  check(cuda::swiglu_forward(ptr(a.out), ptr(a.gate), ptr(a.up), a.n, a.gate.dtype, stream_), "cuda::swiglu_forward");
}
void CudaKernels::swiglu_backward(const kernels::SwiGluBackward& a) {
  check(cuda::swiglu_backward(ptr(a.dgate), ptr(a.dup), ptr(a.dout), ptr(a.gate), ptr(a.up), a.n, a.accumulate,
                              a.dout.dtype, stream_),
        "cuda::swiglu_backward");
}

void CudaKernels::residual_forward(const kernels::ResidualForward& a) {
  check(cuda::residual_forward(ptr(a.out), ptr(a.a), ptr(a.b), a.n, a.a.dtype, stream_), "cuda::residual_forward");
}
void CudaKernels::residual_backward(const kernels::ResidualBackward& a) {
  check(cuda::residual_backward(ptr(a.da), ptr(a.db), ptr(a.dout), a.n, a.accumulate, a.dout.dtype, stream_),
        "cuda::residual_backward");
}

void CudaKernels::cross_entropy_forward(const kernels::CrossEntropyForward& a) {
  check(cuda::cross_entropy_forward(as<float>(a.losses), ptr(a.logits), ids(a.targets), a.rows, a.vocab, a.stride,
                                    a.logits.dtype, stream_),
        "cuda::cross_entropy_forward");
  if (loss_mean_)
    check(target_sums(as<const float>(a.losses), ids(a.targets), a.rows, 0.0f, loss_mean_, nullptr, stream_), "the loss's mean");
}

void CudaKernels::cross_entropy_backward(const kernels::CrossEntropyBackward& a) {
  auto* dloss = reinterpret_cast<float*>(scratch(sizeof(float), "cross-entropy backward"));
  check(target_sums(nullptr, ids(a.targets), a.rows, a.loss_weight, nullptr, dloss, stream_), "the loss gradient's scale");
  check(
      cuda::cross_entropy_backward_from_device(ptr(a.dlogits), ptr(a.logits), ids(a.targets), as<const float>(a.losses),
                                               dloss, a.rows, a.vocab, a.stride, a.accumulate, a.logits.dtype, stream_),
      "cuda::cross_entropy_backward");
}

}  // namespace ferry::kernels::cuda
