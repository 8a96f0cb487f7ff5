// run_cpu_op: maps each op's parameter and tensor slots onto the CPU math in models/ops, one function per kind.
// Slot conventions (inputs -> outputs) per kind, forward | backward. Backward slots follow one rule
// (models/backward.cpp): [grad of out0 (not for the loss), forward inputs (not for Residual), saved outputs]
// -> grads of the forward inputs that are not batch inputs.
//   Embedding    [tokens] -> [x]                      | [dx, tokens] -> []          params [wte, wpe(, type)]
//   LayerNorm    [x] -> [y, mean, rstd]               | [dy, x, mean, rstd] -> [dx] params [w, b]
//   Linear       [x] -> [y]                           | [dy, x] -> [dx]             params [W] or [W, b]
//   Attention    [qkv] -> [y, probs]                  | [dy, qkv, probs, y] -> [dqkv]            (GPT-2)
//                [q, k, v, mask] -> [y, probs]        | [dy, q, k, v, mask, probs, y] -> [dq, dk, dv] (BERT)
//                (y is read by a fused backward, which keeps only a log-sum-exp in place of probs; the CPU's
//                backward reads probs and leaves y alone, but the plan keeps y alive for it either way)
//   Gelu         [x] -> [y]                           | [dy, x] -> [dx]
//   Residual     [a, b] -> [y]                        | [dy] -> [da, db]
//   CrossEntropy [logits, targets] -> [losses]        | [logits, targets] -> [dlogits]
//                (the loss is the mean over targets >= 0; BERT marks the others -100)
#include "models/cpu_op.h"

#include <cstring>
#include <stdexcept>

#include "models/ops/ops.h"

namespace ferry::models {
namespace {

// One op's operands, typed by slot.
struct Call {
  const OpSpec& op;
  const OpAttrs& a;  // op.attrs
  const OpOperands& at;
  float loss_weight;
  bool fwd;

  float* in(size_t k) const { return reinterpret_cast<float*>(at.inputs[k].data); }
  const int32_t* in_i32(size_t k) const { return reinterpret_cast<const int32_t*>(at.inputs[k].data); }
  float* out(size_t k) const { return reinterpret_cast<float*>(at.outputs[k].data); }
  float* value(size_t k) const { return k < at.values.size() ? reinterpret_cast<float*>(at.values[k].data) : nullptr; }  // null: absent
  float* grad(size_t k) const { return k < at.grads.size() ? reinterpret_cast<float*>(at.grads[k].data) : nullptr; }
};

float embedding(const Call& c) {
  const OpAttrs& a = c.a;
  if (c.fwd) ops::embedding_forward(c.out(0), c.in_i32(0), c.value(0), c.value(1), a.batch, a.seq, a.in, c.value(2));
  else ops::embedding_backward(c.grad(0), c.grad(1), c.in(0), c.in_i32(1), a.batch, a.seq, a.in, c.grad(2));
  return 0;
}

float layernorm(const Call& c) {
  const OpAttrs& a = c.a;
  if (c.fwd) ops::layernorm_forward(c.out(0), c.out(1), c.out(2), c.in(0), c.value(0), c.value(1), a.rows, a.in, a.eps);
  else ops::layernorm_backward(c.out(0), c.grad(0), c.grad(1), c.in(0), c.in(1), c.value(0), c.in(2), c.in(3), a.rows, a.in);
  return 0;
}

float linear(const Call& c) {
  const OpAttrs& a = c.a;
  if (c.fwd) ops::linear_forward(c.out(0), c.in(0), c.value(0), c.value(1), a.rows, a.in, a.out, a.weight_out_in);
  else ops::linear_backward(c.out(0), c.grad(0), c.grad(1), c.in(0), c.in(1), c.value(0), a.rows, a.in, a.out, a.weight_out_in);
  return 0;
}

float attention(const Call& c) {
  const OpAttrs& a = c.a;
  // The forward's inputs: GPT-2's packed [qkv] or BERT's [q, k, v, mask]; backward reads dy before them and
  // probs and y after.
  const size_t forward_inputs = c.fwd ? c.op.inputs.size() : c.op.inputs.size() - 3;
  if (forward_inputs == 1) {  // GPT-2: [qkv] | [dy, qkv, probs, y]
    if (c.fwd) ops::attention_forward(c.out(0), c.out(1), c.in(0), a.batch, a.seq, a.in, a.heads);
    else ops::attention_backward(c.out(0), c.in(0), c.in(1), c.in(2), a.batch, a.seq, a.in, a.heads);
    return 0;
  }
  // BERT: [q, k, v, mask] | [dy, q, k, v, mask, probs, y]
  const ops::AttentionShape shape{a.batch, a.seq, a.in, a.heads, a.in, a.causal, c.in_i32(c.fwd ? 3 : 4)};
  if (c.fwd) ops::attention_forward(c.out(0), c.out(1), c.in(0), c.in(1), c.in(2), shape);
  else ops::attention_backward(c.out(0), c.out(1), c.out(2), c.in(0), c.in(1), c.in(2), c.in(3), c.in(5), shape);
  return 0;
}

float gelu(const Call& c) {
  if (c.fwd) ops::gelu_forward(c.out(0), c.in(0), c.a.rows * c.a.in, c.a.exact_gelu);
  else ops::gelu_backward(c.out(0), c.in(0), c.in(1), c.a.rows * c.a.in, c.a.exact_gelu);
  return 0;
}

float residual(const Call& c) {
  if (c.fwd) ops::residual_forward(c.out(0), c.in(0), c.in(1), c.a.rows * c.a.in);
  else ops::residual_backward(c.out(0), c.out(1), c.in(0), c.a.rows * c.a.in);
  return 0;
}

// Forward returns the mean loss over the targets counted; backward scales the gradient to match.
float cross_entropy(const Call& c) {
  const OpAttrs& a = c.a;
  const int32_t* targets = c.in_i32(1);
  int64_t counted = 0;
  for (int64_t r = 0; r < a.rows; ++r) counted += targets[r] >= 0;
  if (!c.fwd) {
    if (counted) ops::cross_entropy_backward(c.out(0), c.in(0), targets, c.loss_weight / static_cast<float>(counted), a.rows, a.in);
    return 0;
  }
  float* losses = c.out(0);
  ops::cross_entropy_forward(losses, c.in(0), targets, a.rows, a.in);
  double sum = 0;
  for (int64_t r = 0; r < a.rows; ++r) sum += losses[r];
  return counted ? static_cast<float>(sum / static_cast<double>(counted)) : 0.0f;
}

float dispatch(const Call& c) {
  switch (c.op.kind) {
    case OpKind::Embedding: return embedding(c);
    case OpKind::LayerNorm: return layernorm(c);
    case OpKind::Linear: return linear(c);
    case OpKind::Attention: return attention(c);
    case OpKind::Gelu: return gelu(c);
    case OpKind::Residual: return residual(c);
    case OpKind::CrossEntropy: return cross_entropy(c);
  }
  throw std::logic_error("run_cpu_op: op " + c.op.name + " has an unknown kind");
}

}  // namespace

float run_cpu_op(const ModelSpec& spec, const OpSpec& op, const OpOperands& at, float loss_weight) {
  for (const auto* list : {&at.inputs, &at.outputs, &at.values, &at.grads})
    for (const Operand& o : *list)
      if (o.data && o.dtype != DType::F32 && o.dtype != DType::I32)
        throw std::invalid_argument("run_cpu_op: op " + op.name + " has an operand stored as " + to_string(o.dtype));
  // Gradient tensors begin life here at zero: backward ops accumulate into them.
  for (int t : op.creates) {
    if (!spec.tensors[t].is_grad) continue;
    for (size_t k = 0; k < op.outputs.size(); ++k)
      if (op.outputs[k] == t) std::memset(at.outputs[k].data, 0, static_cast<size_t>(spec.tensors[t].bytes()));
  }
  return dispatch({op, op.attrs, at, loss_weight, op.pass == Pass::Forward});
}

}  // namespace ferry::models
