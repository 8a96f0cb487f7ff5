// CpuRunner: the resident CPU path: one arena for the activations, the ParameterStore for parameters.
#include "models/cpu_runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "models/cpu_op.h"

namespace ferry::models {

CpuRunner::CpuRunner(const ModelSpec& spec, ParameterStore& params)
    : spec_(spec), params_(params), plan_(memory::Planner::plan(spec.tensor_lifetimes())), arena_(memory::Arena::Backing::Host, plan_.peak) {
  for (size_t t = 0; t < spec.tensors.size(); ++t) tensor_ptr_.push_back(arena_.data() + plan_.offsets[t]);
  for (int p = 0; p < params.count(); ++p) value_ptr_.push_back(params.value(p).data()), grad_ptr_.push_back(params.grad(p).data());
}

void CpuRunner::set_batch(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                          std::span<const int32_t> attention_mask) {
  const int tok = spec_.tensor_index("tokens"), tgt = spec_.tensor_index("targets");
  const auto n = static_cast<size_t>(numel(spec_.tensors[tok].shape));
  if (tokens.size() != n || targets.size() != n || (!attention_mask.empty() && attention_mask.size() != n))
    throw std::invalid_argument("batch has " + std::to_string(tokens.size()) + " tokens; the model step takes " +
                                std::to_string(n));
  std::memcpy(arena_.data() + plan_.offsets[tok], tokens.data(), n * sizeof(int32_t));
  std::memcpy(arena_.data() + plan_.offsets[tgt], targets.data(), n * sizeof(int32_t));
  for (size_t t = 0; t < spec_.tensors.size(); ++t)
    if (spec_.tensors[t].name == "attention_mask") {
      auto* mask = reinterpret_cast<int32_t*>(arena_.data() + plan_.offsets[t]);
      if (attention_mask.empty()) std::fill(mask, mask + n, 1);
      else std::memcpy(mask, attention_mask.data(), n * sizeof(int32_t));
    }
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

std::vector<double> CpuRunner::profile_ops(int min_reps, double min_seconds, int max_reps) {
  std::vector<double> best(spec_.ops.size(), 1e30);
  loss_weight_ = 1.0f;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < max_reps; ++r) {
    if (r >= min_reps && std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= min_seconds) break;
    for (size_t i = 0; i < spec_.ops.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      run_op(spec_.ops[i]);
      best[i] = std::min(best[i], std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  return best;
}

std::span<const float> CpuRunner::tensor(const std::string& name) const {
  const int t = spec_.tensor_index(name);
  if (spec_.tensors[t].dtype != DType::F32) throw std::invalid_argument("tensor '" + name + "' is not fp32");
  const auto* p = reinterpret_cast<const float*>(arena_.data() + plan_.offsets[t]);
  return {p, static_cast<size_t>(numel(spec_.tensors[t].shape))};
}

void CpuRunner::run_op(const OpSpec& op) {
  std::vector<Operand> in, out, values, grads;
  for (int t : op.inputs) in.push_back({tensor_ptr_[t], spec_.tensors[t].dtype});
  for (int t : op.outputs) out.push_back({tensor_ptr_[t], spec_.tensors[t].dtype});
  for (int p : op.params)
    values.push_back({reinterpret_cast<std::byte*>(value_ptr_[p]), DType::F32}), grads.push_back({reinterpret_cast<std::byte*>(grad_ptr_[p]), DType::F32});
  const float loss = run_cpu_op(spec_, op, {in, out, values, grads}, loss_weight_);
  if (op.kind == OpKind::CrossEntropy && op.pass == Pass::Forward) last_loss_ = loss;
}

}  // namespace ferry::models
