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
  auto f32 = [](std::byte* p) { return reinterpret_cast<float*>(p); };
  auto i32 = [](std::byte* p) { return reinterpret_cast<const int32_t*>(p); };
  float loss = 0.0f;
  // Gradient tensors begin life here at zero: backward ops accumulate into them.
  for (int t : op.creates) {
    if (!spec.tensors[t].is_grad) continue;
    for (size_t k = 0; k < op.outputs.size(); ++k)
      if (op.outputs[k] == t) std::memset(at.outputs[k], 0, static_cast<size_t>(spec.tensors[t].bytes()));
  }

  const OpAttrs& a = op.attrs;
  const auto& in = at.inputs;
  const auto& out = at.outputs;
  const bool fwd = op.pass == Pass::Forward;
  switch (op.kind) {
    case OpKind::Embedding:
      if (fwd) ops::embedding_forward(f32(out[0]), i32(in[0]), at.values[0], at.values[1], a.batch, a.seq, a.in,
                                      at.values.size() > 2 ? at.values[2] : nullptr);
      else ops::embedding_backward(at.grads[0], at.grads[1], f32(in[0]), i32(in[1]), a.batch, a.seq, a.in,
                                   at.grads.size() > 2 ? at.grads[2] : nullptr);
      break;
    case OpKind::LayerNorm:
      if (fwd) ops::layernorm_forward(f32(out[0]), f32(out[1]), f32(out[2]), f32(in[0]), at.values[0], at.values[1], a.rows, a.in, a.eps);
      else ops::layernorm_backward(f32(out[0]), at.grads[0], at.grads[1], f32(in[0]), f32(in[1]), at.values[0], f32(in[2]), f32(in[3]), a.rows, a.in);
      break;
    case OpKind::Linear: {
      const bool has_bias = at.values.size() > 1;
      if (fwd) ops::linear_forward(f32(out[0]), f32(in[0]), at.values[0], has_bias ? at.values[1] : nullptr, a.rows, a.in, a.out, a.weight_out_in);
      else ops::linear_backward(f32(out[0]), at.grads[0], has_bias ? at.grads[1] : nullptr, f32(in[0]), f32(in[1]), at.values[0], a.rows, a.in, a.out, a.weight_out_in);
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
