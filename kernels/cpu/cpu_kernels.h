// CpuKernels: the CPU's OpKernels, the fp32 math of kernels/cpu/ops.h; and run_on_cpu, which runs an op call
// on them whatever its operands' storage (bf16/fp16 widened to fp32 around the op).
#pragma once

#include "kernels/op_call.h"
#include "kernels/op_kernels.h"

namespace ferry::kernels::cpu {

// Computes in fp32 only: operands stored in bf16/fp16 reach it widened by run_on_cpu.
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
  void rmsnorm_forward(const RmsNormForward& a) override;
  void rmsnorm_backward(const RmsNormBackward& a) override;
  void rope_forward(const RopeForward& a) override;
  void rope_backward(const RopeBackward& a) override;
  void swiglu_forward(const SwiGluForward& a) override;
  void swiglu_backward(const SwiGluBackward& a) override;
  void residual_forward(const ResidualForward& a) override;
  void residual_backward(const ResidualBackward& a) override;
  void cross_entropy_forward(const CrossEntropyForward& a) override;
  void cross_entropy_backward(const CrossEntropyBackward& a) override;
};

// Runs `call` on CpuKernels: operands stored in bf16/fp16 are widened to fp32 in this thread's Storage
// workspace (workspace.h) around the op and its results rounded back to nearest even, so the math is the
// fp32 math of ops.h; fp32 and int32 operands are used in place. Returns the batch's mean loss for the
// loss's forward op, else 0.
float run_on_cpu(const OpCall& call);

}  // namespace ferry::kernels::cpu
