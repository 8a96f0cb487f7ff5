// CudaKernels: the CUDA device's OpKernels (kernels/op_kernels.h), every op on one stream in fp32, bf16 or
// fp16 storage through the launch functions of kernels/cuda (ops.h, linear.h, attention.h), its scratch from
// the plan's workspace (sized by engine/ops/op_workspace.h from the same scratch functions).
// Built only with FERRY_WITH_CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/linear.h"
#include "kernels/op_kernels.h"

namespace ferry::kernels::cuda {

// The cuBLASLt workspace every matmul may use (NVIDIA's suggestion for Hopper). A smaller bound workspace
// still runs, with the algorithms that fit in it.
constexpr int64_t kLtWorkspaceBytes = int64_t{32} << 20;

// The attention shape of an op's dims.
AttentionShape attention_shape(const kernels::AttentionDims& d);
// cuDNN's SDPA where it runs this shape and storage (cudnn_sdpa_available), else the flash kernel.
AttentionKernel choose_attention_kernel(const AttentionShape& s, DType dtype);

class CudaKernels final : public kernels::OpKernels {
 public:
  CudaKernels() = default;

  // Where the next ops run: the stream, the plan's workspace (the only scratch any op takes; an op needing
  // more throws, naming both sizes), and where the loss's forward writes the batch's mean (a device address,
  // e.g. of pinned mapped host memory; null: not computed). The dispatcher's CrossEntropyForward::loss, a host
  // float, stays 0: reading the mean there would stall the host on the stream.
  void bind(cudaStream_t stream, std::byte* workspace, int64_t workspace_bytes, float* loss_mean);

  bool computes_in(DType compute) const override {
    return compute == DType::F32 || compute == DType::BF16 || compute == DType::F16;
  }
  void zero(kernels::Operand tensor, int64_t bytes) override;
  void embedding_forward(const kernels::EmbeddingForward& a) override;
  void embedding_backward(const kernels::EmbeddingBackward& a) override;
  void layernorm_forward(const kernels::LayerNormForward& a) override;
  void layernorm_backward(const kernels::LayerNormBackward& a) override;
  void linear_forward(const kernels::LinearForward& a) override;
  void linear_backward(const kernels::LinearBackward& a) override;
  void attention_forward(const kernels::AttentionForward& a) override;
  void attention_backward(const kernels::AttentionBackward& a) override;
  void gelu_forward(const kernels::GeluForward& a) override;
  void gelu_backward(const kernels::GeluBackward& a) override;
  void rmsnorm_forward(const kernels::RmsNormForward& a) override;
  void rmsnorm_backward(const kernels::RmsNormBackward& a) override;
  void rope_forward(const kernels::RopeForward& a) override;
  void rope_backward(const kernels::RopeBackward& a) override;
  void swiglu_forward(const kernels::SwiGluForward& a) override;
  void swiglu_backward(const kernels::SwiGluBackward& a) override;
  void residual_forward(const kernels::ResidualForward& a) override;
  void residual_backward(const kernels::ResidualBackward& a) override;
  void cross_entropy_forward(const kernels::CrossEntropyForward& a) override;
  void cross_entropy_backward(const kernels::CrossEntropyBackward& a) override;

  // The kernel of an attention shape, chosen the first time it runs and kept: forward and backward of one
  // op (the same shape and storage) always run the same kernel, whose log-sum-exp the backward reads.
  AttentionKernel attention_kernel(const AttentionShape& s, DType dtype);

 private:
  // The workspace, checked to hold `bytes` for `what`.
  std::byte* scratch(int64_t bytes, const char* what) const;

  LtMatmuls& lt();  // made on first use: cuBLASLt starts only where a Linear runs

  cudaStream_t stream_ = nullptr;
  std::byte* workspace_ = nullptr;
  int64_t workspace_bytes_ = 0;
  float* loss_mean_ = nullptr;
  std::unique_ptr<LtMatmuls> lt_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool, DType>, AttentionKernel> attention_kernels_;
};

}  // namespace ferry::kernels::cuda
