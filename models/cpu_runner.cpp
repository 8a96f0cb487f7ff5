// CpuRunner: maps each op's parameter and tensor slots onto the CPU math in models/ops.
// Slot conventions (inputs -> outputs) per kind, forward | backward:
//   Embedding    [tokens] -> [x]                      | [dx, tokens] -> []          params [wte, wpe]
//   LayerNorm    [x] -> [y, mean, rstd]               | [dy, x, mean, rstd] -> [dx] params [w, b]
//   Linear       [x] -> [y]                           | [dy, x] -> [dx]             params [W] or [W, b]
//   Attention    [qkv] -> [y, probs]                  | [dy, qkv, probs] -> [dqkv]
//   Gelu         [x] -> [y]                           | [dy, x] -> [dx]
//   Residual     [a, b] -> [y]                        | [dy] -> [da, db]
//   CrossEntropy [logits, targets] -> [losses]        | [logits, targets] -> [dlogits]
#include "models/cpu_runner.h"

#include <cstring>
#include <stdexcept>

#include "models/ops/ops.h"

namespace ferry::models {

CpuRunner::CpuRunner(const ModelSpec& spec, ParameterStore& params)
    : spec_(spec), params_(params), plan_(memory::Planner::plan(spec.tensor_lifetimes())), arena_(memory::Arena::Backing::Host, plan_.peak) {}

void CpuRunner::set_batch(std::span<const int32_t> tokens, std::span<const int32_t> targets) {
  const int tok = spec_.tensor_index("tokens"), tgt = spec_.tensor_index("targets");
  const auto n = static_cast<size_t>(numel(spec_.tensors[tok].shape));
  if (tokens.size() != n || targets.size() != n)
    throw std::invalid_argument("batch has " + std::to_string(tokens.size()) + " tokens; the model step takes " +
                                std::to_string(n));
  std::memcpy(arena_.data() + plan_.offsets[tok], tokens.data(), n * sizeof(int32_t));
  std::memcpy(arena_.data() + plan_.offsets[tgt], targets.data(), n * sizeof(int32_t));
}

float CpuRunner::forward() {
  for (const auto& op : spec_.ops)
    if (op.pass == Pass::Forward) run_op(op);
  return last_loss_;
}

float CpuRunner::forward_backward(float loss_weight) {
  loss_weight_ = loss_weight;
  for (const auto& op : spec_.ops) run_op(op);
  return last_loss_;
}

std::span<const float> CpuRunner::tensor(const std::string& name) const {
  const int t = spec_.tensor_index(name);
  if (spec_.tensors[t].dtype != DType::F32) throw std::invalid_argument("tensor '" + name + "' is not fp32");
  const auto* p = reinterpret_cast<const float*>(arena_.data() + plan_.offsets[t]);
  return {p, static_cast<size_t>(numel(spec_.tensors[t].shape))};
}

void CpuRunner::run_op(const OpSpec& op) {
  for (int t : op.creates)
    if (spec_.tensors[t].is_grad) std::memset(f32(t), 0, static_cast<size_t>(spec_.tensors[t].bytes()));

  const OpAttrs& a = op.attrs;
  const auto& in = op.inputs;
  const auto& out = op.outputs;
  const bool fwd = op.pass == Pass::Forward;
  switch (op.kind) {
    case OpKind::Embedding:
      if (fwd) ops::embedding_forward(f32(out[0]), i32(in[0]), value(op.params[0]), value(op.params[1]), a.batch, a.seq, a.in);
      else ops::embedding_backward(grad(op.params[0]), grad(op.params[1]), f32(in[0]), i32(in[1]), a.batch, a.seq, a.in);
      break;
    case OpKind::LayerNorm:
      if (fwd) ops::layernorm_forward(f32(out[0]), f32(out[1]), f32(out[2]), f32(in[0]), value(op.params[0]), value(op.params[1]), a.rows, a.in);
      else ops::layernorm_backward(f32(out[0]), grad(op.params[0]), grad(op.params[1]), f32(in[0]), f32(in[1]), value(op.params[0]), f32(in[2]), f32(in[3]), a.rows, a.in);
      break;
    case OpKind::Linear: {
      const bool has_bias = op.params.size() > 1;
      if (fwd) ops::linear_forward(f32(out[0]), f32(in[0]), value(op.params[0]), has_bias ? value(op.params[1]) : nullptr, a.rows, a.in, a.out, a.weight_out_in);
      else ops::linear_backward(f32(out[0]), grad(op.params[0]), has_bias ? grad(op.params[1]) : nullptr, f32(in[0]), f32(in[1]), value(op.params[0]), a.rows, a.in, a.out, a.weight_out_in);
      break;
    }
    case OpKind::Attention:
      if (fwd) ops::attention_forward(f32(out[0]), f32(out[1]), f32(in[0]), a.batch, a.seq, a.in, a.heads);
      else ops::attention_backward(f32(out[0]), f32(in[0]), f32(in[1]), f32(in[2]), a.batch, a.seq, a.in, a.heads);
      break;
    case OpKind::Gelu:
      if (fwd) ops::gelu_forward(f32(out[0]), f32(in[0]), a.rows * a.in);
      else ops::gelu_backward(f32(out[0]), f32(in[0]), f32(in[1]), a.rows * a.in);
      break;
    case OpKind::Residual:
      if (fwd) ops::residual_forward(f32(out[0]), f32(in[0]), f32(in[1]), a.rows * a.in);
      else ops::residual_backward(f32(out[0]), f32(out[1]), f32(in[0]), a.rows * a.in);
      break;
    case OpKind::CrossEntropy:
      if (fwd) {
        float* losses = f32(out[0]);
        ops::cross_entropy_forward(losses, f32(in[0]), i32(in[1]), a.rows, a.in);
        double sum = 0;
        for (int64_t r = 0; r < a.rows; ++r) sum += losses[r];
        last_loss_ = static_cast<float>(sum / static_cast<double>(a.rows));
      } else {
        ops::cross_entropy_backward(f32(out[0]), f32(in[0]), i32(in[1]), loss_weight_ / static_cast<float>(a.rows), a.rows, a.in);
      }
      break;
  }
}

}  // namespace ferry::models
