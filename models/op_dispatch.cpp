// dispatch_op: each op's tensor and parameter slots, by kind and pass, into OpKernels' argument structs.
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
#include "models/op_dispatch.h"

#include <optional>
#include <stdexcept>
#include <string>

namespace ferry::models {
namespace {

using namespace kernels;  // the argument structs

// One op's operands by slot; absent parameters (and, in forward, their gradients) read as null operands.
struct Slots {
  const OpSpec& op;
  const OpOperands& at;
  bool fwd() const { return op.pass == Pass::Forward; }
  Operand in(size_t k) const { return at.inputs[k]; }
  Operand out(size_t k) const { return at.outputs[k]; }
  Operand value(size_t k) const { return k < at.values.size() ? at.values[k] : Operand{}; }
  Operand grad(size_t k) const { return k < at.grads.size() ? at.grads[k] : Operand{}; }
};

// A view `elements` into an operand: q, k and v inside GPT-2's packed rows.
Operand offset(Operand o, int64_t elements) { return {o.data + elements * dtype_bytes(o.dtype), o.dtype}; }

void embedding(const Slots& s, OpKernels& k) {
  const OpAttrs& a = s.op.attrs;
  if (s.fwd()) k.embedding_forward({s.out(0), s.in(0), s.value(0), s.value(1), s.value(2), a.batch, a.seq, a.in});
  else k.embedding_backward({s.grad(0), s.grad(1), s.grad(2), s.in(0), s.in(1), a.batch, a.seq, a.in});
}

void layernorm(const Slots& s, OpKernels& k) {
  const OpAttrs& a = s.op.attrs;
  if (s.fwd()) k.layernorm_forward({s.out(0), s.out(1), s.out(2), s.in(0), s.value(0), s.value(1), a.rows, a.in, a.eps});
  else k.layernorm_backward({s.out(0), s.grad(0), s.grad(1), s.in(0), s.in(1), s.value(0), s.in(2), s.in(3), a.rows, a.in});
}

void linear(const Slots& s, OpKernels& k) {
  const OpAttrs& a = s.op.attrs;
  if (s.fwd()) k.linear_forward({s.out(0), s.in(0), s.value(0), s.value(1), a.rows, a.in, a.out, a.weight_out_in});
  else k.linear_backward({s.out(0), s.grad(0), s.grad(1), s.in(0), s.in(1), s.value(0), a.rows, a.in, a.out, a.weight_out_in});
}

void attention(const Slots& s, OpKernels& k) {
  const OpAttrs& a = s.op.attrs;
  const int64_t C = a.in;
  // The forward's inputs: GPT-2's packed [qkv] or BERT's [q, k, v, mask]; backward reads dy before them and
  // probs and y after.
  const size_t forward_inputs = s.fwd() ? s.op.inputs.size() : s.op.inputs.size() - 3;
  const size_t first = s.fwd() ? 0 : 1;  // the first forward input's slot
  if (forward_inputs == 1) {  // GPT-2: [qkv] | [dy, qkv, probs, y] -> [dqkv]
    const AttentionDims dims{a.batch, a.seq, C, a.heads, 3 * C, a.causal};
    const Operand qkv = s.in(first);
    if (s.fwd()) return k.attention_forward({s.out(0), s.out(1), qkv, offset(qkv, C), offset(qkv, 2 * C), {}, dims});
    const Operand dqkv = s.out(0);
    return k.attention_backward({dqkv, offset(dqkv, C), offset(dqkv, 2 * C), s.in(0), qkv, offset(qkv, C),
                                 offset(qkv, 2 * C), {}, s.in(2), s.in(3), dims});
  }
  // BERT: [q, k, v, mask] | [dy, q, k, v, mask, probs, y] -> [dq, dk, dv]
  const AttentionDims dims{a.batch, a.seq, C, a.heads, C, a.causal};
  if (s.fwd()) return k.attention_forward({s.out(0), s.out(1), s.in(0), s.in(1), s.in(2), s.in(3), dims});
  k.attention_backward({s.out(0), s.out(1), s.out(2), s.in(0), s.in(1), s.in(2), s.in(3), s.in(4), s.in(5), s.in(6), dims});
}

void gelu(const Slots& s, OpKernels& k) {
  const int64_t n = s.op.attrs.rows * s.op.attrs.in;
  if (s.fwd()) k.gelu_forward({s.out(0), s.in(0), n, s.op.attrs.exact_gelu});
  else k.gelu_backward({s.out(0), s.in(0), s.in(1), n, s.op.attrs.exact_gelu});
}

void residual(const Slots& s, OpKernels& k) {
  const int64_t n = s.op.attrs.rows * s.op.attrs.in;
  if (s.fwd()) k.residual_forward({s.out(0), s.in(0), s.in(1), n});
  else k.residual_backward({s.out(0), s.out(1), s.in(0), n});
}

float cross_entropy(const Slots& s, float loss_weight, OpKernels& k) {
  const OpAttrs& a = s.op.attrs;
  if (!s.fwd()) {
    k.cross_entropy_backward({s.out(0), s.in(0), s.in(1), a.rows, a.in, loss_weight});
    return 0;
  }
  float loss = 0;
  k.cross_entropy_forward({s.out(0), s.in(0), s.in(1), a.rows, a.in, &loss});
  return loss;
}

// Checks operands against what the op's slots hold and agrees on the one floating dtype they share.
class DtypeCheck {
 public:
  explicit DtypeCheck(const OpSpec& op) : op_(op) {}

  void tensor(Operand o, const TensorSpec& t) {
    if (!o.data) fail("tensor " + t.name + " has no operand");
    if (t.fixed_dtype) {  // ids, statistics, losses: stored as the spec says whatever the precision
      if (o.dtype != t.dtype) fail("tensor " + t.name + " is " + to_string(o.dtype) + ", its slot takes " + to_string(t.dtype));
      return;
    }
    floating(o, "tensor " + t.name);
  }
  void floating(Operand o, const std::string& what) {
    if (!o.data) return;  // absent
    if (o.dtype == DType::I32) fail(what + " is int32, its slot takes a floating dtype");
    if (compute_ && *compute_ != o.dtype)
      fail(what + " is " + to_string(o.dtype) + " but the op's other operands are " + to_string(*compute_));
    compute_ = o.dtype;
  }
  DType compute() const { return compute_.value_or(DType::F32); }
  [[noreturn]] void fail(const std::string& why) const { throw std::invalid_argument("op " + op_.name + ": " + why); }

 private:
  const OpSpec& op_;
  std::optional<DType> compute_;
};

void check_counts(const OpSpec& op, const OpOperands& at, DtypeCheck& check) {
  const auto counted = [&](const char* what, size_t given, size_t slots) {
    if (given != slots)
      check.fail(std::string("given ") + std::to_string(given) + " " + what + " operands, its slots take " + std::to_string(slots));
  };
  counted("input", at.inputs.size(), op.inputs.size());
  counted("output", at.outputs.size(), op.outputs.size());
  counted("parameter", at.values.size(), op.params.size());
  if (op.pass == Pass::Backward) counted("gradient", at.grads.size(), op.params.size());
}

}  // namespace

DType op_compute_dtype(const ModelSpec& spec, const OpSpec& op, const OpOperands& at) {
  DtypeCheck check(op);
  check_counts(op, at, check);
  for (size_t k = 0; k < op.inputs.size(); ++k) check.tensor(at.inputs[k], spec.tensors[op.inputs[k]]);
  for (size_t k = 0; k < op.outputs.size(); ++k) check.tensor(at.outputs[k], spec.tensors[op.outputs[k]]);
  for (size_t k = 0; k < op.params.size(); ++k) {
    check.floating(at.values[k], "parameter " + spec.params[op.params[k]].name);
    // Forward never touches the gradients: they may be absent, or stored however the caller keeps them.
    if (op.pass == Pass::Backward) check.floating(at.grads[k], "gradient of " + spec.params[op.params[k]].name);
  }
  return check.compute();
}

float dispatch_op(const ModelSpec& spec, const OpSpec& op, const OpOperands& at, float loss_weight, OpKernels& kernels) {
  const DType compute = op_compute_dtype(spec, op, at);
  if (!kernels.computes_in(compute))
    throw std::invalid_argument("op " + op.name + ": this device's kernels do not compute in " + to_string(compute));
  // Gradient tensors begin life here at zero: backward ops accumulate into them.
  for (int t : op.creates) {
    if (!spec.tensors[t].is_grad) continue;
    for (size_t k = 0; k < op.outputs.size(); ++k)
      if (op.outputs[k] == t) kernels.zero(at.outputs[k], numel(spec.tensors[t].shape) * dtype_bytes(at.outputs[k].dtype));
  }
  const Slots s{op, at};
  switch (op.kind) {
    case OpKind::Embedding: embedding(s, kernels); return 0;
    case OpKind::LayerNorm: layernorm(s, kernels); return 0;
    case OpKind::Linear: linear(s, kernels); return 0;
    case OpKind::Attention: attention(s, kernels); return 0;
    case OpKind::Gelu: gelu(s, kernels); return 0;
    case OpKind::Residual: residual(s, kernels); return 0;
    case OpKind::CrossEntropy: return cross_entropy(s, loss_weight, kernels);
  }
  throw std::logic_error("dispatch_op: op " + op.name + " has an unknown kind");
}

}  // namespace ferry::models
