// run_cpu_op: maps each op's parameter and tensor slots onto the CPU math in models/ops.
// Slot conventions (inputs -> outputs) per kind, forward | backward:
//   Embedding    [tokens] -> [x]                      | [dx, tokens] -> []          params [wte, wpe(, type)]
//   LayerNorm    [x] -> [y, mean, rstd]               | [dy, x, mean, rstd] -> [dx] params [w, b]
//   Linear       [x] -> [y]                           | [dy, x] -> [dx]             params [W] or [W, b]
//   Attention    [qkv] -> [y, probs]                  | [dy, qkv, probs] -> [dqkv]            (GPT-2)
//                [q, k, v, mask] -> [y, probs]        | [dy, q, k, v, probs, mask] -> [dq, dk, dv] (BERT)
//   Gelu         [x] -> [y]                           | [dy, x] -> [dx]
//   Residual     [a, b] -> [y]                        | [dy] -> [da, db]
//   CrossEntropy [logits, targets] -> [losses]        | [logits, targets] -> [dlogits]
//                (the loss is the mean over targets >= 0; BERT marks the others -100)
#include "models/cpu_op.h"

#include <cstring>

#include "models/ops/ops.h"

namespace ferry::models {

float run_cpu_op(const ModelSpec& spec, const OpSpec& op, const OpOperands& at, float loss_weight) {
  auto f32 = [&](int t) { return reinterpret_cast<float*>(at.tensors[t]); };
  auto i32 = [&](int t) { return reinterpret_cast<const int32_t*>(at.tensors[t]); };
  auto value = [&](int p) { return at.values[p]; };
  auto grad = [&](int p) { return at.grads[p]; };
  float loss = 0.0f;
  for (int t : op.creates)
    if (spec.tensors[t].is_grad) std::memset(f32(t), 0, static_cast<size_t>(spec.tensors[t].bytes()));

  const OpAttrs& a = op.attrs;
  const auto& in = op.inputs;
  const auto& out = op.outputs;
  const bool fwd = op.pass == Pass::Forward;
  switch (op.kind) {
    case OpKind::Embedding:
      if (fwd) ops::embedding_forward(f32(out[0]), i32(in[0]), value(op.params[0]), value(op.params[1]), a.batch, a.seq, a.in,
                                      op.params.size() > 2 ? value(op.params[2]) : nullptr);
      else ops::embedding_backward(grad(op.params[0]), grad(op.params[1]), f32(in[0]), i32(in[1]), a.batch, a.seq, a.in,
                                   op.params.size() > 2 ? grad(op.params[2]) : nullptr);
      break;
    case OpKind::LayerNorm:
      if (fwd) ops::layernorm_forward(f32(out[0]), f32(out[1]), f32(out[2]), f32(in[0]), value(op.params[0]), value(op.params[1]), a.rows, a.in, a.eps);
      else ops::layernorm_backward(f32(out[0]), grad(op.params[0]), grad(op.params[1]), f32(in[0]), f32(in[1]), value(op.params[0]), f32(in[2]), f32(in[3]), a.rows, a.in);
      break;
    case OpKind::Linear: {
      const bool has_bias = op.params.size() > 1;
      if (fwd) ops::linear_forward(f32(out[0]), f32(in[0]), value(op.params[0]), has_bias ? value(op.params[1]) : nullptr, a.rows, a.in, a.out, a.weight_out_in);
      else ops::linear_backward(f32(out[0]), grad(op.params[0]), has_bias ? grad(op.params[1]) : nullptr, f32(in[0]), f32(in[1]), value(op.params[0]), a.rows, a.in, a.out, a.weight_out_in);
      break;
    }
    case OpKind::Attention:
      if (in.size() <= 3) {  // packed qkv
        if (fwd) ops::attention_forward(f32(out[0]), f32(out[1]), f32(in[0]), a.batch, a.seq, a.in, a.heads);
        else ops::attention_backward(f32(out[0]), f32(in[0]), f32(in[1]), f32(in[2]), a.batch, a.seq, a.in, a.heads);
      } else if (fwd) {
        ops::attention_forward(f32(out[0]), f32(out[1]), f32(in[0]), f32(in[1]), f32(in[2]),
                               {a.batch, a.seq, a.in, a.heads, a.in, a.causal, i32(in[3])});
      } else {
        ops::attention_backward(f32(out[0]), f32(out[1]), f32(out[2]), f32(in[0]), f32(in[1]), f32(in[2]), f32(in[3]), f32(in[4]),
                                {a.batch, a.seq, a.in, a.heads, a.in, a.causal, i32(in[5])});
      }
      break;
    case OpKind::Gelu:
      if (fwd) ops::gelu_forward(f32(out[0]), f32(in[0]), a.rows * a.in, a.exact_gelu);
      else ops::gelu_backward(f32(out[0]), f32(in[0]), f32(in[1]), a.rows * a.in, a.exact_gelu);
      break;
    case OpKind::Residual:
      if (fwd) ops::residual_forward(f32(out[0]), f32(in[0]), f32(in[1]), a.rows * a.in);
      else ops::residual_backward(f32(out[0]), f32(out[1]), f32(in[0]), a.rows * a.in);
      break;
    case OpKind::CrossEntropy:
      int64_t counted = 0;  // targets in the loss
      for (int64_t r = 0; r < a.rows; ++r) counted += i32(in[1])[r] >= 0;
      if (fwd) {
        float* losses = f32(out[0]);
        ops::cross_entropy_forward(losses, f32(in[0]), i32(in[1]), a.rows, a.in);
        double sum = 0;
        for (int64_t r = 0; r < a.rows; ++r) sum += losses[r];
        loss = counted ? static_cast<float>(sum / static_cast<double>(counted)) : 0.0f;
      } else if (counted) {
        ops::cross_entropy_backward(f32(out[0]), f32(in[0]), i32(in[1]), loss_weight / static_cast<float>(counted), a.rows, a.in);
      }
      break;
  }
  return loss;
}

}  // namespace ferry::models
