// DeviceBindings: device tensors from the plan's memory layout, then each op's operands by position.
#include "engine/device_bindings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace ferry::engine {
namespace {

std::string bucket_name(const models::ModelSpec& spec, const memory::BucketLayout& layout, int b) {
  const auto& params = layout.buckets()[b].params;
  return fmt::format("bucket {} ({}{})", b, spec.params[params.front()].name,
                     params.size() > 1 ? " .. " + spec.params[params.back()].name : "");
}

}  // namespace

DeviceBindings::DeviceBindings(const models::ModelSpec& spec, const offload::StepPlan& plan, std::byte* arena,
                               int64_t red_zone_bytes)
    : arena_(arena), red_zone_(red_zone_bytes) {
  place(spec, plan);
  bind(spec, plan);
}

void DeviceBindings::place(const models::ModelSpec& spec, const offload::StepPlan& plan) {
  using Kind = offload::DeviceTensor::Kind;
  const offload::OffloadProblem& p = plan.problem;
  const auto& tensors = plan.memory.tensors;
  const int nb = p.n_buckets;
  resident_.assign(nb, -1), grads_.assign(nb, -1), state_.assign(nb, -1), gradsum_.assign(nb, -1);
  windows_.assign(nb, {});
  entries_of_.assign(spec.tensors.size(), {});
  for (int b = 0; b < nb; ++b) bucket_label_.push_back(bucket_name(spec, p.layout, b));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const offload::DeviceTensor& t = tensors[i];
    const int d = static_cast<int>(i);
    offsets_.push_back(plan.memory.layout.offsets[i]);
    lives_.push_back(t.life);
    bytes_.push_back(t.life.bytes);  // the red zone follows it
    switch (t.kind) {
      case Kind::Activation:
        entries_of_[p.activation_tensor[t.index]].push_back(d);
        names_.push_back(spec.tensors[p.activation_tensor[t.index]].name);
        break;
      case Kind::Weights:
        if (plan.schedule.resident[t.index]) resident_[t.index] = d;
        else windows_[t.index].push_back({t.life.first, t.life.last, d});
        names_.push_back("weights of " + bucket_label_[t.index]);
        break;
      case Kind::Grads: grads_[t.index] = d, names_.push_back("gradients of " + bucket_label_[t.index]); break;
      case Kind::OptimizerState: state_[t.index] = d, names_.push_back("optimizer state of " + bucket_label_[t.index]); break;
      case Kind::GradSum: gradsum_[t.index] = d, names_.push_back("gradient sum of " + bucket_label_[t.index]); break;
      case Kind::Workspace: workspace_ = d, names_.push_back("workspace"); break;
    }
  }
  for (size_t x = 0; x < spec.tensors.size(); ++x)
    if (spec.tensors[x].is_input) input_names_.push_back(spec.tensors[x].name), input_tensors_.push_back(entries_of_[x].front());
}

int DeviceBindings::input_tensor(const std::string& name) const {
  for (size_t i = 0; i < input_names_.size(); ++i)
    if (input_names_[i] == name) return input_tensors_[i];
  return -1;
}

std::byte* DeviceBindings::activation_at(const models::ModelSpec& spec, int x, int t, int* tensor) const {
  for (int d : entries_of_[x])
    if (lives_[d].first <= t && t <= lives_[d].last) return *tensor = d, address(d);
  throw std::logic_error("tensor " + spec.tensors[x].name + " is not alive at op " + std::to_string(t));
}

int DeviceBindings::weights_at(int b, int t) const {
  if (resident_[b] >= 0) return resident_[b];
  for (const Window& w : windows_[b])
    if (w.first <= t && t <= w.last) return w.tensor;
  throw std::logic_error(bucket_label_[b] + " is not on the device at op " + std::to_string(t));
}

void DeviceBindings::bind(const models::ModelSpec& spec, const offload::StepPlan& plan) {
  const offload::OffloadProblem& p = plan.problem;
  ops_.resize(p.n_ops);
  for (int t = 0; t < p.n_ops; ++t) {
    const models::OpSpec& op = spec.ops[p.op_source[t]];
    Op& o = ops_[t];
    std::string buckets;
    for (int b : p.op_buckets[t]) buckets += (buckets.empty() ? "" : ", ") + std::to_string(b);
    o.label = op.name + (p.op_recompute[t] ? " (recompute)" : "") + (buckets.empty() ? "" : " [bucket " + buckets + "]");
    int d = -1;
    for (int x : op.inputs) o.inputs.push_back({activation_at(spec, x, t, &d), spec.tensors[x].dtype}), o.touched.push_back(d);
    for (int x : op.outputs) o.outputs.push_back({activation_at(spec, x, t, &d), spec.tensors[x].dtype}), o.touched.push_back(d);
    const int64_t element = dtype_bytes(p.precision);  // weights and their gradients are stored in the precision
    for (int param : op.params) {
      const auto& slot = p.layout.slot(param);
      const int w = weights_at(slot.bucket, t);
      o.values.push_back({address(w) + slot.offset * element, p.precision});
      o.touched.push_back(w);
      // A frozen parameter's bucket has no gradient buffer: its operand is null and backward computes no
      // weight gradient for it.
      const bool backward = op.pass == models::Pass::Backward && !spec.params[param].frozen;
      if (backward && grads_[slot.bucket] < 0) throw std::logic_error(bucket_label_[slot.bucket] + " has no gradient buffer at op " + op.name);
      o.grads.push_back({backward ? address(grads_[slot.bucket]) + slot.offset * element : nullptr, p.precision});
      if (backward) o.touched.push_back(grads_[slot.bucket]);
    }
  }
  // Batch inputs live the whole step, so their red zones can never be reused and need no arming.
  for (size_t x = 0; x < spec.tensors.size(); ++x)
    if (!spec.tensors[x].is_input)
      for (int d : entries_of_[x]) ops_[lives_[d].first].created.push_back(d);
  for (int b = 0; b < p.n_buckets; ++b) {
    if (p.first_grad_op[b] < 0) continue;
    ops_[p.first_grad_op[b]].zero_grads_before.push_back(b);
    if (gradsum_[b] >= 0) ops_[p.last_grad_op[b]].sum_grads_after.push_back(b);
  }
}

void DeviceBindings::arm(int tensor) const {
  if (red_zone_ > 0) std::memset(address(tensor) + bytes_[tensor], static_cast<int>(memory::Arena::kUnwritten), static_cast<size_t>(red_zone_));
}

std::string DeviceBindings::check(int tensor) const {
  const std::byte* zone = address(tensor) + bytes_[tensor];
  for (int64_t i = 0; i < red_zone_; ++i)
    if (zone[i] != memory::Arena::kUnwritten)
      return fmt::format("the red zone after {} ({} bytes at arena offset {}) was overwritten {} bytes past its end", names_[tensor],
                         bytes_[tensor], offsets_[tensor], i);
  return {};
}

}  // namespace ferry::engine
