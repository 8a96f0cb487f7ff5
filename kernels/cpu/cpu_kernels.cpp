// CpuKernels: each argument struct onto the fp32 functions of ops.h (null operands stay null).
#include "kernels/cpu/cpu_kernels.h"

#include <cstring>

#include "kernels/cpu/ops.h"

namespace ferry::kernels::cpu {
namespace {

float* f32(Operand o) { return reinterpret_cast<float*>(o.data); }
const int32_t* i32(Operand o) { return reinterpret_cast<const int32_t*>(o.data); }

AttentionShape shape_of(const AttentionDims& d, Operand key_mask) {
  return {d.batch, d.seq, d.channels, d.heads, d.row_stride, d.causal, i32(key_mask), d.kv_heads, d.kv_row_stride};
}

RopeShape shape_of(const RopeDims& d) { return {d.batch, d.seq, d.heads, d.head_size, d.row_stride, d.scaling}; }

int64_t targets_counted(const int32_t* targets, int64_t rows) {
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) counted += targets[r] >= 0;
  return counted;
}

}  // namespace

void CpuKernels::zero(Operand tensor, int64_t bytes) { std::memset(tensor.data, 0, static_cast<size_t>(bytes)); }

void CpuKernels::embedding_forward(const EmbeddingForward& a) {
  cpu::embedding_forward(f32(a.out), i32(a.tokens), f32(a.wte), f32(a.wpe), a.batch, a.seq, a.channels, f32(a.type));
}
void CpuKernels::embedding_backward(const EmbeddingBackward& a) {
  cpu::embedding_backward(f32(a.dwte), f32(a.dwpe), f32(a.dout), i32(a.tokens), a.batch, a.seq, a.channels,
                          f32(a.dtype));
}

void CpuKernels::layernorm_forward(const LayerNormForward& a) {
  cpu::layernorm_forward(f32(a.out), f32(a.mean), f32(a.rstd), f32(a.x), f32(a.w), f32(a.b), a.rows, a.channels, a.eps);
}
void CpuKernels::layernorm_backward(const LayerNormBackward& a) {
  cpu::layernorm_backward(f32(a.dx), f32(a.dw), f32(a.db), f32(a.dout), f32(a.x), f32(a.w), f32(a.mean), f32(a.rstd),
                          a.rows, a.channels, a.accumulate);
}

void CpuKernels::linear_forward(const LinearForward& a) {
  cpu::linear_forward(f32(a.out), f32(a.x), f32(a.w), f32(a.bias), a.rows, a.in, a.out_features, a.weight_out_in);
}
void CpuKernels::linear_backward(const LinearBackward& a) {
  cpu::linear_backward(f32(a.dx), f32(a.dw), f32(a.dbias), f32(a.dout), f32(a.x), f32(a.w), a.rows, a.in,
                       a.out_features, a.weight_out_in, a.accumulate);
}

// The CPU's backward reads probs; y is left alone.
void CpuKernels::attention_forward(const AttentionForward& a) {
  cpu::attention_forward(f32(a.out), f32(a.probs), f32(a.q), f32(a.k), f32(a.v), shape_of(a.dims, a.key_mask));
}
void CpuKernels::attention_backward(const AttentionBackward& a) {
  cpu::attention_backward(f32(a.dq), f32(a.dk), f32(a.dv), f32(a.dout), f32(a.q), f32(a.k), f32(a.v), f32(a.probs),
                          shape_of(a.dims, a.key_mask), a.accumulate);
}

void CpuKernels::gelu_forward(const GeluForward& a) { cpu::gelu_forward(f32(a.out), f32(a.x), a.n, a.exact); }
void CpuKernels::gelu_backward(const GeluBackward& a) {
  cpu::gelu_backward(f32(a.dx), f32(a.dout), f32(a.x), a.n, a.exact, a.accumulate);
}

void CpuKernels::rmsnorm_forward(const RmsNormForward& a) {
  cpu::rmsnorm_forward(f32(a.out), f32(a.rstd), f32(a.x), f32(a.w), a.rows, a.channels, a.eps);
}
void CpuKernels::rmsnorm_backward(const RmsNormBackward& a) {
  cpu::rmsnorm_backward(f32(a.dx), f32(a.dw), f32(a.dout), f32(a.x), f32(a.w), f32(a.rstd), a.rows, a.channels,
                        a.accumulate);
}

void CpuKernels::rope_forward(const RopeForward& a) { cpu::rope_forward(f32(a.out), f32(a.x), shape_of(a.dims)); }
void CpuKernels::rope_backward(const RopeBackward& a) {
  cpu::rope_backward(f32(a.dx), f32(a.dout), shape_of(a.dims), a.accumulate);
}

void CpuKernels::swiglu_forward(const SwiGluForward& a) {
  cpu::swiglu_forward(f32(a.out), f32(a.gate), f32(a.up), a.n);
}
void CpuKernels::swiglu_backward(const SwiGluBackward& a) {
  cpu::swiglu_backward(f32(a.dgate), f32(a.dup), f32(a.dout), f32(a.gate), f32(a.up), a.n, a.accumulate);
}

void CpuKernels::residual_forward(const ResidualForward& a) {
  cpu::residual_forward(f32(a.out), f32(a.a), f32(a.b), a.n);
}
void CpuKernels::residual_backward(const ResidualBackward& a) {
  cpu::residual_backward(f32(a.da), f32(a.db), f32(a.dout), a.n, a.accumulate);
}

// The mean is summed in double over the per-token losses, in row order, so it is reproducible.
void CpuKernels::cross_entropy_forward(const CrossEntropyForward& a) {
  float* losses = f32(a.losses);
  cpu::cross_entropy_forward(losses, f32(a.logits), i32(a.targets), a.rows, a.vocab, a.stride);
  const int64_t counted = targets_counted(i32(a.targets), a.rows);
  double sum = 0;
  for (int64_t r = 0; r < a.rows; ++r) sum += losses[r];
  *a.loss = counted ? static_cast<float>(sum / static_cast<double>(counted)) : 0.0f;
}
void CpuKernels::cross_entropy_backward(const CrossEntropyBackward& a) {
  const int64_t counted = targets_counted(i32(a.targets), a.rows);
  if (counted)
    cpu::cross_entropy_backward(f32(a.dlogits), f32(a.logits), i32(a.targets),
                                a.loss_weight / static_cast<float>(counted), a.rows, a.vocab, a.stride, a.accumulate);
  else if (!a.accumulate)  // no target: a zero gradient
    std::memset(a.dlogits.data, 0, static_cast<size_t>(a.rows * a.stride) * sizeof(float));
}

}  // namespace ferry::kernels::cpu
