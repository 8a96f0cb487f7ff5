// decode_op: each op's tensor and parameter slots, by kind and pass, into a kernel call: the argument struct
// of its kind and pass (kernels/op_kernels.h), and each operand's size and use.
// Slot conventions (inputs -> outputs) per kind, forward | backward. Backward slots follow one rule
// (models/backward.cpp): [grad of out0 (not for the loss), forward inputs (not for Residual), saved outputs]
// -> grads of the forward inputs that are not batch inputs.
//   Embedding    [tokens] -> [x]                      | [dx, tokens] -> []          params [wte, wpe(, type)]
//   LayerNorm    [x] -> [y, mean, rstd]               | [dy, x, mean, rstd] -> [dx] params [w, b]
//   Linear       [x] -> [y]                           | [dy, x] -> [dx]             params [W] or [W, b]
//   Attention    [qkv] -> [y, probs]                  | [dy, qkv, probs, y] -> [dqkv]            (GPT-2)
//                [q, k, v, mask] -> [y, probs]        | [dy, q, k, v, mask, probs, y] -> [dq, dk, dv] (BERT)
//                [q, k, v] -> [y, probs]              | [dy, q, k, v, probs, y] -> [dq, dk, dv]  (Llama: causal; k
//                and v of attrs.kv_heads heads, grouped-query attention)
//                (y is read by a fused backward, which keeps only a log-sum-exp in place of probs; the CPU's
//                backward reads probs and leaves y alone, but the plan keeps y alive for it either way)
//   Gelu         [x] -> [y]                           | [dy, x] -> [dx]
//   Residual     [a, b] -> [y]                        | [dy] -> [da, db]
//   RmsNorm      [x] -> [y, rstd]                     | [dy, x, rstd] -> [dx]       params [w]
//   Rope         [x] -> [y]                           | [dy] -> [dx]                (attrs.heads: q's or k's)
//   SwiGlu       [gate, up] -> [y]                    | [dy, gate, up] -> [dgate, dup]
//   CrossEntropy [logits, targets] -> [losses]        | [logits, targets, losses] -> [dlogits]
//                (the loss is the mean over targets >= 0; BERT marks the others -100)
#include "engine/ops/op_dispatch.h"

#include <optional>
#include <stdexcept>
#include <string>

#include "kernels/cpu/cpu_kernels.h"

namespace ferry::ops {
namespace {

using kernels::Operand;
using kernels::OpKernels;
using models::OpAttrs;

// One op's operands by slot; absent parameters (and, in forward, their gradients) read as null operands.
struct Slots {
  const models::OpSpec& op;
  std::span<const Operand> inputs, outputs, values, grads;
  bool accumulate;  // backward: add into the outputs (false: write them, this op produces them first)
  bool fwd() const { return op.pass == models::Pass::Forward; }
  Operand in(size_t k) const { return inputs[k]; }
  Operand out(size_t k) const { return outputs[k]; }
  Operand value(size_t k) const { return k < values.size() ? values[k] : Operand{}; }
  Operand grad(size_t k) const { return k < grads.size() ? grads[k] : Operand{}; }
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
  else
    k.layernorm_backward(
        {s.out(0), s.grad(0), s.grad(1), s.in(0), s.in(1), s.value(0), s.in(2), s.in(3), a.rows, a.in, s.accumulate});
}

void linear(const Slots& s, OpKernels& k) {
  const OpAttrs& a = s.op.attrs;
  if (s.fwd()) k.linear_forward({s.out(0), s.in(0), s.value(0), s.value(1), a.rows, a.in, a.out, a.weight_out_in});
  else
    k.linear_backward({s.out(0), s.grad(0), s.grad(1), s.in(0), s.in(1), s.value(0), a.rows, a.in, a.out,
                       a.weight_out_in, s.accumulate});
}

void attention(const Slots& s, OpKernels& k) {
  const OpAttrs& a = s.op.attrs;
  const int64_t C = a.in;
  // The forward's inputs: GPT-2's packed [qkv], Llama's [q, k, v] or BERT's [q, k, v, mask]; backward reads dy
  // before them and probs and y after.
  const size_t forward_inputs = s.fwd() ? s.op.inputs.size() : s.op.inputs.size() - 3;
  const size_t first = s.fwd() ? 0 : 1;  // the first forward input's slot
  const kernels::AttentionDims dims = attention_dims(a, forward_inputs == 1);
  if (forward_inputs == 1) {  // GPT-2: [qkv] | [dy, qkv, probs, y] -> [dqkv]
    const Operand qkv = s.in(first);
    if (s.fwd()) return k.attention_forward({s.out(0), s.out(1), qkv, offset(qkv, C), offset(qkv, 2 * C), {}, dims});
    const Operand dqkv = s.out(0);
    return k.attention_backward({dqkv,
                                 offset(dqkv, C),
                                 offset(dqkv, 2 * C),
                                 s.in(0),
                                 qkv,
                                 offset(qkv, C),
                                 offset(qkv, 2 * C),
                                 {},
                                 s.in(2),
                                 s.in(3),
                                 dims,
                                 s.accumulate});
  }
  // BERT: [q, k, v, mask] | [dy, q, k, v, mask, probs, y]; Llama: [q, k, v] | [dy, q, k, v, probs, y] -> [dq, dk, dv]
  const Operand q = s.in(first), key = s.in(first + 1), v = s.in(first + 2);
  const Operand mask = forward_inputs == 4 ? s.in(first + 3) : Operand{};
  if (s.fwd()) return k.attention_forward({s.out(0), s.out(1), q, key, v, mask, dims});
  const size_t probs = first + forward_inputs;  // then y
  k.attention_backward(
      {s.out(0), s.out(1), s.out(2), s.in(0), q, key, v, mask, s.in(probs), s.in(probs + 1), dims, s.accumulate});
}

void gelu(const Slots& s, OpKernels& k) {
  const int64_t n = s.op.attrs.rows * s.op.attrs.in;
  if (s.fwd()) k.gelu_forward({s.out(0), s.in(0), n, s.op.attrs.exact_gelu});
  else k.gelu_backward({s.out(0), s.in(0), s.in(1), n, s.op.attrs.exact_gelu, s.accumulate});
}

void residual(const Slots& s, OpKernels& k) {
  const int64_t n = s.op.attrs.rows * s.op.attrs.in;
  if (s.fwd()) k.residual_forward({s.out(0), s.in(0), s.in(1), n});
  else k.residual_backward({s.out(0), s.out(1), s.in(0), n, s.accumulate});
}

void rmsnorm(const Slots& s, OpKernels& k) {
  const OpAttrs& a = s.op.attrs;
  if (s.fwd()) k.rmsnorm_forward({s.out(0), s.out(1), s.in(0), s.value(0), a.rows, a.in, a.eps});
  else k.rmsnorm_backward({s.out(0), s.grad(0), s.in(0), s.in(1), s.value(0), s.in(2), a.rows, a.in, s.accumulate});
}

void rope(const Slots& s, OpKernels& k) {
  const OpAttrs& a = s.op.attrs;
  const kernels::RopeDims dims{a.batch, a.seq, a.heads, a.in / a.heads, a.in, a.rope};
  if (s.fwd()) k.rope_forward({s.out(0), s.in(0), dims});
  else k.rope_backward({s.out(0), s.in(0), dims, s.accumulate});
}

void swiglu(const Slots& s, OpKernels& k) {
  const int64_t n = s.op.attrs.rows * s.op.attrs.in;
  if (s.fwd()) k.swiglu_forward({s.out(0), s.in(0), s.in(1), n});
  else k.swiglu_backward({s.out(0), s.out(1), s.in(0), s.in(1), s.in(2), n, s.accumulate});
}

float cross_entropy(const Slots& s, float loss_weight, OpKernels& k) {
  const OpAttrs& a = s.op.attrs;
  if (!s.fwd()) {
    k.cross_entropy_backward({s.out(0), s.in(0), s.in(1), s.in(2), a.rows, a.out, a.in, loss_weight, s.accumulate});
    return 0;
  }
  float loss = 0;
  k.cross_entropy_forward({s.out(0), s.in(0), s.in(1), a.rows, a.out, a.in, &loss});
  return loss;
}

// Checks operands against what the op's slots hold and agrees on the one floating dtype they share.
class DtypeCheck {
 public:
  explicit DtypeCheck(const models::OpSpec& op) : op_(op) {}

  void tensor(Operand o, const models::TensorSpec& t) {
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
  const models::OpSpec& op_;
  std::optional<DType> compute_;
};

void check_counts(const models::OpSpec& op, const OpOperands& at, DtypeCheck& check) {
  const auto counted = [&](const char* what, size_t given, size_t slots) {
    if (given != slots)
      check.fail(std::string("given ") + std::to_string(given) + " " + what + " operands, its slots take " + std::to_string(slots));
  };
  counted("input", at.inputs.size(), op.inputs.size());
  counted("output", at.outputs.size(), op.outputs.size());
  counted("parameter", at.values.size(), op.params.size());
  if (op.pass == models::Pass::Backward) counted("gradient", at.grads.size(), op.params.size());
}

// The op's kernel: the argument struct of its kind and pass, from its operands by slot.
float launch(const Slots& s, float loss_weight, OpKernels& kernels) {
  switch (s.op.kind) {
    case models::OpKind::Embedding: embedding(s, kernels); return 0;
    case models::OpKind::LayerNorm: layernorm(s, kernels); return 0;
    case models::OpKind::Linear: linear(s, kernels); return 0;
    case models::OpKind::Attention: attention(s, kernels); return 0;
    case models::OpKind::Gelu: gelu(s, kernels); return 0;
    case models::OpKind::Residual: residual(s, kernels); return 0;
    case models::OpKind::CrossEntropy: return cross_entropy(s, loss_weight, kernels);
    case models::OpKind::RmsNorm: rmsnorm(s, kernels); return 0;
    case models::OpKind::Rope: rope(s, kernels); return 0;
    case models::OpKind::SwiGlu: swiglu(s, kernels); return 0;
  }
  throw std::logic_error("decode_op: op " + s.op.name + " has an unknown kind");
}


}  // namespace

kernels::AttentionDims attention_dims(const models::OpAttrs& a, bool packed) {
  const int64_t kv_width = a.kv_heads > 0 ? a.in / a.heads * a.kv_heads : 0;
  return {a.batch, a.seq, a.in, a.heads, packed ? 3 * a.in : a.in, a.causal, a.kv_heads, kv_width};
}

DType op_compute_dtype(const models::ModelSpec& spec, const models::OpSpec& op, const OpOperands& at) {
  DtypeCheck check(op);
  check_counts(op, at, check);
  for (size_t k = 0; k < op.inputs.size(); ++k) check.tensor(at.inputs[k], spec.tensors[op.inputs[k]]);
  for (size_t k = 0; k < op.outputs.size(); ++k) check.tensor(at.outputs[k], spec.tensors[op.outputs[k]]);
  for (size_t k = 0; k < op.params.size(); ++k) {
    check.floating(at.values[k], "parameter " + spec.params[op.params[k]].name);
    // Forward never touches the gradients: they may be absent, or stored however the caller keeps them.
    if (op.pass == models::Pass::Backward) check.floating(at.grads[k], "gradient of " + spec.params[op.params[k]].name);
  }
  return check.compute();
}

kernels::OpCall decode_op(const models::ModelSpec& spec, const models::OpSpec& op, const OpOperands& at,
                          float loss_weight) {
  kernels::OpCall call{op.name, op_compute_dtype(spec, op, at), {}, {}};
  const bool fwd = op.pass == models::Pass::Forward;
  const auto tensor = [&](Operand o, int t, bool read, bool written, bool zeroed) {
    call.operands.push_back({o, models::numel(spec.tensors[t].shape), read, written, zeroed});
  };
  const auto param = [&](Operand o, int p, bool written) {
    call.operands.push_back({o, models::numel(spec.params[p].shape), true, written, false});
  };
  for (size_t k = 0; k < at.inputs.size(); ++k) tensor(at.inputs[k], op.inputs[k], true, false, false);
  // Forward overwrites its outputs; backward writes them when it produces them all first, else accumulates
  // into them, into a gradient it creates only after zeroing it.
  const bool writes = spec.writes_gradients(op);
  for (size_t k = 0; k < at.outputs.size(); ++k) {
    const bool created = !writes && spec.creates_gradient(op, op.outputs[k]);
    tensor(at.outputs[k], op.outputs[k], !fwd && !writes && !created, true, created);
  }
  for (size_t k = 0; k < at.values.size(); ++k) param(at.values[k], op.params[k], false);
  if (!fwd)  // forward leaves gradients alone
    for (size_t k = 0; k < at.grads.size(); ++k) param(at.grads[k], op.params[k], true);
  const size_t inputs = at.inputs.size(), outputs = at.outputs.size(), values = at.values.size();
  call.launch = [&op, loss_weight, inputs, outputs, values, writes](OpKernels& kernels, std::span<const Operand> o) {
    const Slots s{op,
                  o.first(inputs),
                  o.subspan(inputs, outputs),
                  o.subspan(inputs + outputs, values),
                  o.subspan(inputs + outputs + values),
                  !writes};
    return launch(s, loss_weight, kernels);
  };
  return call;
}

float dispatch_op(const models::ModelSpec& spec, const models::OpSpec& op, const OpOperands& at, float loss_weight,
                  OpKernels& kernels) {
  return kernels::run_call(decode_op(spec, op, at, loss_weight), kernels);
}

float run_cpu_op(const models::ModelSpec& spec, const models::OpSpec& op, const OpOperands& at, float loss_weight) {
  return kernels::cpu::run_on_cpu(decode_op(spec, op, at, loss_weight));
}

}  // namespace ferry::ops
