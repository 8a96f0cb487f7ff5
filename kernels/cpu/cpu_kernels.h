// CpuKernels: the CPU's OpKernels, the fp32 math of kernels/cpu/ops.h behind the dispatcher. Operands
// stored in bf16/fp16 reach it widened to fp32 by run_cpu_op (models/cpu_op.h); it computes in fp32 only.
#pragma once

#include "kernels/op_kernels.h"

namespace ferry::kernels::cpu {

class CpuKernels final : public OpKernels {
 public:
  bool computes_in(DType compute) const override { return compute == DType::F32; }
  void zero(Operand tensor, int64_t bytes) override;
  void embedding_forward(const EmbeddingForward& a) override;
  void embedding_backward(const EmbeddingBackward& a) override;
  void layernorm_forward(const LayerNormForward& a) override;
  void layernorm_backward(const LayerNormBackward& a) override;
  void linear_forward(const LinearForward& a) override;
  void linear_backward(const LinearBackward& a) override;
  void attention_forward(const AttentionForward& a) override;
  void attention_backward(const AttentionBackward& a) override;
  void gelu_forward(const GeluForward& a) override;
  void gelu_backward(const GeluBackward& a) override;
  void residual_forward(const ResidualForward& a) override;
  void residual_backward(const ResidualBackward& a) override;
  void cross_entropy_forward(const CrossEntropyForward& a) override;
  void cross_entropy_backward(const CrossEntropyBackward& a) override;
};

}  // namespace ferry::kernels::cpu
