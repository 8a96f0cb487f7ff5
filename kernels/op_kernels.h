// The kernels' side of an op: one argument struct per kind and pass, and OpKernels, a backend's
// implementation of every one (the CPU's fp32 math in kernels/cpu, the CUDA kernels in kernels/cuda).
// engine/ops decodes a model's op into these; nothing here knows a model.
#pragma once

#include <cstddef>
#include <cstdint>

#include "foundation/rope.h"
#include "memory/dtype.h"

namespace ferry::kernels {

// One operand: where it is and how it is stored (fp32, bf16, fp16; int32 for token ids). Null data: absent
// (a Linear without bias, GPT-2's token-type row, the gradient of a frozen parameter: the backend then
// computes no weight gradient). Element types: ids and the key mask int32; LayerNorm statistics and
// per-token losses fp32; every other operand of one op shares one floating dtype (the op's compute dtype:
// fp32 on the CPU after widening, bf16/fp16/fp32 on CUDA).
struct Operand {
  std::byte* data = nullptr;
  DType dtype = DType::F32;
};

// out (B,T,C) = wte[tokens] (+ type) + wpe[t]. tokens (B,T); wte (V,C); wpe (maxT,C); type (C) or null.
struct EmbeddingForward { Operand out, tokens, wte, wpe, type; int64_t batch, seq, channels; };
// dwte, dwpe, dtype (like the tables; dtype null for GPT-2) += scatter / sums of dout (B,T,C).
struct EmbeddingBackward { Operand dwte, dwpe, dtype, dout, tokens; int64_t batch, seq, channels; };

// x, out (N,C); w, b (C); mean, rstd (N) fp32, saved for backward.
struct LayerNormForward { Operand out, mean, rstd, x, w, b; int64_t rows, channels; float eps; };
// dx (N,C) += ...; dw, db (C) += ...; reads dout (N,C), x, w, mean, rstd.
struct LayerNormBackward {
  Operand dx, dw, db, dout, x, w, mean, rstd;
  int64_t rows, channels;
  bool accumulate = true;
};

// out (N,OC) = x (N,IC) @ W + bias (OC, or null); W [IC,OC], or [OC,IC] with weight_out_in.
struct LinearForward { Operand out, x, w, bias; int64_t rows, in, out_features; bool weight_out_in; };
// dx (N,IC) += dout W^T; dw (like W) += x^T dout; dbias (OC, or null) += column sums of dout.
struct LinearBackward {
  Operand dx, dw, dbias, dout, x, w;
  int64_t rows, in, out_features;
  bool weight_out_in;
  bool accumulate = true;
};

// q, k, v: (B,T,C) views whose rows are row_stride elements apart: GPT-2's packed qkv (B,T,3C) split at
// 0, C, 2C (row_stride 3C), or BERT's three tensors (row_stride C). key_mask (B,T) int32 or null (causal).
// out (B,T,C); probs (B,NH,T,T) saved for backward. Head size hs = C / heads.
// Grouped-query attention (Llama): k and v are (B,T,kv_heads*hs) with rows kv_row_stride apart, and query
// head h reads key/value head h / (heads / kv_heads). Zero in either: as above (kv_heads = heads,
// kv_row_stride = row_stride), so GPT-2 and BERT leave them out.
struct AttentionDims {
  int64_t batch, seq, channels, heads, row_stride;
  bool causal;
  int64_t kv_heads = 0;
  int64_t kv_row_stride = 0;
};
struct AttentionForward { Operand out, probs, q, k, v, key_mask; AttentionDims dims; };
// dq, dk, dv (the same views, of dqkv for GPT-2) += ...; y is the forward's output (read by fused kernels
// that keep a log-sum-exp in place of probs; the CPU reads probs).
struct AttentionBackward {
  Operand dq, dk, dv, dout, q, k, v, key_mask, probs, y;
  AttentionDims dims;
  bool accumulate = true;
};

// x, out (N); exact: the erf form (BERT), else tanh (GPT-2).
struct GeluForward { Operand out, x; int64_t n; bool exact; };
struct GeluBackward {
  Operand dx, dout, x;
  int64_t n;
  bool exact;
  bool accumulate = true;
};

// RMSNorm over the last dim (Llama, Mistral, Qwen2): out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps).
// x, out (rows, channels); w (channels); rstd (rows) fp32, saved for backward.
struct RmsNormForward {
  Operand out, rstd, x, w;
  int64_t rows, channels;
  float eps;
};
// dx (rows, channels) += ...; dw (channels, or null) += ...; reads dout, x, w, rstd.
struct RmsNormBackward {
  Operand dx, dw, dout, x, w, rstd;
  int64_t rows, channels;
  bool accumulate = true;
};

// Rotary position embedding of q or k: x, out (batch, seq, heads, head_size), the rows of one token
// `row_stride` elements apart in both. Hugging Face's rotate_half pairing: element i and i + head_size/2 of
// a head rotate by the angle t * rope_inv_freq(i, head_size, scaling), t the position (0..seq-1):
//   out[i] = x[i] cos - x[i+h/2] sin;  out[i+h/2] = x[i+h/2] cos + x[i] sin.   Out of place (out != x).
struct RopeDims {
  int64_t batch, seq, heads, head_size, row_stride;
  RopeScaling scaling;
};
struct RopeForward {
  Operand out, x;
  RopeDims dims;
};
// dx += R^T dout (the rotation by -angle); dx and dout laid out as x.
struct RopeBackward {
  Operand dx, dout;
  RopeDims dims;
  bool accumulate = true;
};

// SwiGLU, Llama's MLP activation: out = silu(gate) * up, silu(g) = g / (1 + exp(-g)); all (n) elements.
struct SwiGluForward {
  Operand out, gate, up;
  int64_t n;
};
// dgate += dout * up * silu'(gate); dup += dout * silu(gate).
struct SwiGluBackward {
  Operand dgate, dup, dout, gate, up;
  int64_t n;
  bool accumulate = true;
};

// out = a + b (N); da += dout, db += dout.
struct ResidualForward { Operand out, a, b; int64_t n; };
struct ResidualBackward {
  Operand da, db, dout;
  int64_t n;
  bool accumulate = true;
};

// Logits (N, stride) of which the first V (vocab) columns are the classes; the columns past them (a padded
// vocabulary's, models/vocab.h) never enter the softmax, and their gradients are left as they are (zero).
// losses (N) fp32 = logsumexp(logits[:, :V]) - logits[target], 0 where target < 0; *loss (host) receives
// the mean over the targets >= 0 (0 when there are none).
struct CrossEntropyForward {
  Operand losses, logits, targets;
  int64_t rows, vocab, stride;
  float* loss;
};
// dlogits[:, :V] += loss_weight / count * (softmax(logits[:, :V]) - onehot(target)), count = targets >= 0 (the
// backend counts them, on its device), nothing where target < 0.
struct CrossEntropyBackward {
  Operand dlogits, logits, targets, losses;  // losses: the forward's (the CUDA kernel finds each row's lse in them)
  int64_t rows, vocab, stride;
  float loss_weight;
  bool accumulate = true;
};

// A device's implementation of every op kind and pass. Forward overwrites its outputs. Backward adds (+=) into
// its parameters' gradients always, and into its outputs (the activation gradients: dx, dq/dk/dv, da/db,
// dgate/dup, dlogits) while `accumulate`; with accumulate false it writes its outputs instead, every element
// (a padded vocabulary's columns, rows without a target and masked keys as zeros): the dispatcher clears it
// when the op is the first to produce every one of them, so they are neither zeroed nor read before.
class OpKernels {
 public:
  virtual ~OpKernels() = default;
  // Whether the backend computes in `compute` (the op's one floating dtype); an OpCall in another is
  // refused, naming the op (kernels/op_call.h).
  virtual bool computes_in(DType compute) const = 0;
  // Sets `bytes` of a gradient tensor the op creates to zero, before the op accumulates into it.
  virtual void zero(Operand tensor, int64_t bytes) = 0;
  virtual void embedding_forward(const EmbeddingForward& a) = 0;
  virtual void embedding_backward(const EmbeddingBackward& a) = 0;
  virtual void layernorm_forward(const LayerNormForward& a) = 0;
  virtual void layernorm_backward(const LayerNormBackward& a) = 0;
  virtual void linear_forward(const LinearForward& a) = 0;
  virtual void linear_backward(const LinearBackward& a) = 0;
  virtual void attention_forward(const AttentionForward& a) = 0;
  virtual void attention_backward(const AttentionBackward& a) = 0;
  virtual void gelu_forward(const GeluForward& a) = 0;
  virtual void gelu_backward(const GeluBackward& a) = 0;
  virtual void rmsnorm_forward(const RmsNormForward& a) = 0;
  virtual void rmsnorm_backward(const RmsNormBackward& a) = 0;
  virtual void rope_forward(const RopeForward& a) = 0;
  virtual void rope_backward(const RopeBackward& a) = 0;
  virtual void swiglu_forward(const SwiGluForward& a) = 0;
  virtual void swiglu_backward(const SwiGluBackward& a) = 0;
  virtual void residual_forward(const ResidualForward& a) = 0;
  virtual void residual_backward(const ResidualBackward& a) = 0;
  virtual void cross_entropy_forward(const CrossEntropyForward& a) = 0;
  virtual void cross_entropy_backward(const CrossEntropyBackward& a) = 0;
};

}  // namespace ferry::kernels
