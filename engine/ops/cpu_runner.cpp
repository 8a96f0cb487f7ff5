// CpuRunner: the resident CPU path: one arena for the activations, the ParameterStore for parameters (through
// a working copy in the precision when that is not fp32).
#include "engine/ops/cpu_runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "engine/ops/op_dispatch.h"
#include "memory/convert.h"

namespace ferry::ops {

using models::numel;
using models::OpKind;
using models::OpSpec;
using models::Pass;
using models::TensorSpec;

CpuRunner::CpuRunner(const models::ModelSpec& spec, models::ParameterStore& params)
    : spec_(spec), params_(params), plan_(memory::Planner::plan(spec.tensor_lifetimes())),
      arena_(memory::Arena::Backing::Host, plan_.peak) {
  for (size_t t = 0; t < spec.tensors.size(); ++t) tensor_ptr_.push_back(arena_.data() + plan_.offsets[t]);
  const auto bytes_of = [](std::span<float> s) { return reinterpret_cast<std::byte*>(s.data()); };
  if (!working_copy()) {  // fp32: the ops read and accumulate into the store itself
    for (int p = 0; p < params.count(); ++p)
      value_.push_back({bytes_of(params.value(p)), DType::F32}), grad_.push_back({bytes_of(params.grad(p)), DType::F32});
    return;
  }
  // Each parameter's slice of the working copy starts on a cache line, like the store's.
  std::vector<size_t> offset;
  size_t total = 0;
  for (int p = 0; p < params.count(); ++p) {
    offset.push_back(total);
    total += memory::align_up(params.value(p).size() * static_cast<size_t>(dtype_bytes(spec.precision)), 64);
  }
  working_values_ = memory::HostBuffer(total);
  working_grads_ = memory::HostBuffer(total);
  for (int p = 0; p < params.count(); ++p)
    value_.push_back({working_values_.data() + offset[p], spec.precision}),
        grad_.push_back({working_grads_.data() + offset[p], spec.precision});
}

void CpuRunner::round_parameters() {
  for (int p = 0; p < params_.count(); ++p) {
    const auto v = params_.value(p);
    memory::narrow(value_[p].data, spec_.precision, v.data(), static_cast<int64_t>(v.size()));
  }
}

void CpuRunner::add_gradients() {
  for (int p = 0; p < params_.count(); ++p) {
    const auto g = params_.grad(p);
    memory::accumulate_widened(g.data(), grad_[p].data, spec_.precision, static_cast<int64_t>(g.size()), false);
  }
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
  if (working_copy()) round_parameters();
  for (const auto& op : spec_.ops)
    if (op.pass == Pass::Forward) run_op(op);
  return last_loss_;
}

float CpuRunner::forward_backward(float loss_weight) {
  loss_weight_ = loss_weight;
  if (working_copy()) round_parameters(), std::memset(working_grads_.data(), 0, working_grads_.bytes());
  for (const auto& op : spec_.ops) run_op(op);
  if (working_copy()) add_gradients();
  return last_loss_;
}

std::vector<double> CpuRunner::profile_ops(int min_reps, double min_seconds, int max_reps) {
  std::vector<double> best(spec_.ops.size(), 1e30);
  loss_weight_ = 1.0f;
  if (working_copy()) round_parameters();  // times on real weights (and no NaN from a blank copy)
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

std::vector<float> CpuRunner::tensor(const std::string& name) const {
  const int i = spec_.tensor_index(name);
  const TensorSpec& t = spec_.tensors[i];
  if (t.dtype == DType::I32) throw std::invalid_argument("tensor '" + name + "' holds int32 ids, not floats");
  std::vector<float> out(static_cast<size_t>(numel(t.shape)));
  memory::widen(out.data(), arena_.data() + plan_.offsets[i], t.dtype, numel(t.shape));
  return out;
}

void CpuRunner::run_op(const OpSpec& op) {
  std::vector<kernels::Operand> in, out, values, grads;
  for (int t : op.inputs) in.push_back({tensor_ptr_[t], spec_.tensors[t].dtype});
  for (int t : op.outputs) out.push_back({tensor_ptr_[t], spec_.tensors[t].dtype});
  for (int p : op.params) values.push_back(value_[p]), grads.push_back(grad_[p]);
  const float loss = run_cpu_op(spec_, op, {in, out, values, grads}, loss_weight_);
  if (op.kind == OpKind::CrossEntropy && op.pass == Pass::Forward) last_loss_ = loss;
}

}  // namespace ferry::ops
