// CostModel: the roofline per op, and JSON in and out with every field checked.
#include "offload/cost_model.h"

#include <algorithm>
#include <fstream>
#include <stdexcept>

namespace ferry::offload {

double CostModel::op_seconds(const models::ModelSpec& spec, const models::OpSpec& op) const {
  if (profiled_op_s.size() == spec.ops.size() && &op >= spec.ops.data() && &op < spec.ops.data() + spec.ops.size())
    return profiled_op_s[static_cast<size_t>(&op - spec.ops.data())];
  double bytes = 0;
  for (int p : op.params) bytes += double(models::numel(spec.params[p].shape)) * weight_bytes;
  for (const auto* list : {&op.inputs, &op.outputs})
    for (int t : *list) bytes += double(tensor_bytes(spec, t));
  return op_overhead_s + std::max(op.flops / flops_per_s, bytes / memory_bytes_per_s);
}

int64_t CostModel::tensor_bytes(const models::ModelSpec& spec, int tensor) const {
  const auto& shape = spec.tensors[tensor].shape;
  const bool probabilities = spec.tensors[tensor].name.ends_with("attn.probs");  // (B, heads, T, T)
  if (fused_attention && probabilities) return models::numel(shape) / shape.back() * 4;
  return models::numel(shape) * activation_bytes;
}

CostModel CostModel::from_json(const nlohmann::json& j, const std::string& origin) {
  CostModel c;
  auto number = [&](const char* key, double& dst, double lo) {
    if (!j.contains(key)) return;
    if (!j[key].is_number() || j[key].get<double>() < lo)
      throw std::runtime_error(origin + ": '" + key + "' must be a number >= " + std::to_string(lo));
    dst = j[key].get<double>();
  };
  auto link = [&](const char* key, LinkCost& dst) {
    if (!j.contains(key)) return;
    const auto& l = j[key];
    if (!l.is_object() || !l.contains("gbps") || !l["gbps"].is_number() || l["gbps"].get<double>() <= 0)
      throw std::runtime_error(origin + ": '" + key + "' needs {\"gbps\": > 0, \"latency_s\": >= 0}");
    dst.gbps = l["gbps"].get<double>();
    if (l.contains("latency_s")) dst.latency_s = std::max(0.0, l["latency_s"].get<double>());
  };
  if (!j.is_object()) throw std::runtime_error(origin + ": a cost model is a JSON object");
  c.name = j.value("name", origin);
  c.assumed = j.value("assumed", true);
  number("flops_per_s", c.flops_per_s, 1e6);
  number("memory_bytes_per_s", c.memory_bytes_per_s, 1e6);
  number("op_overhead_s", c.op_overhead_s, 0);
  number("cpu_adam_params_per_s", c.cpu_adam_params_per_s, 1);
  number("device_adam_params_per_s", c.device_adam_params_per_s, 1);
  c.cpu_norm_params_per_s = 7 * c.cpu_adam_params_per_s;
  number("cpu_norm_params_per_s", c.cpu_norm_params_per_s, 1);
  double ab = c.activation_bytes, wb = c.weight_bytes;
  number("activation_bytes", ab, 1);
  number("weight_bytes", wb, 1);
  c.activation_bytes = static_cast<int>(ab), c.weight_bytes = static_cast<int>(wb);
  if (j.contains("fused_attention")) {
    if (!j["fused_attention"].is_boolean()) throw std::runtime_error(origin + ": 'fused_attention' must be true or false");
    c.fused_attention = j["fused_attention"].get<bool>();
  }
  link("h2d", c.h2d);
  link("d2h", c.d2h);
  return c;
}

CostModel CostModel::load(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("offload.cost_model: cannot open '" + path.string() + "'");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) throw std::runtime_error(path.string() + ": not valid JSON");
  return from_json(j, path.string());
}

nlohmann::json CostModel::to_json() const {
  return {{"name", name},
          {"assumed", assumed},
          {"flops_per_s", flops_per_s},
          {"memory_bytes_per_s", memory_bytes_per_s},
          {"op_overhead_s", op_overhead_s},
          {"activation_bytes", activation_bytes},
          {"weight_bytes", weight_bytes},
          {"fused_attention", fused_attention},
          {"h2d", {{"gbps", h2d.gbps}, {"latency_s", h2d.latency_s}}},
          {"d2h", {{"gbps", d2h.gbps}, {"latency_s", d2h.latency_s}}},
          {"cpu_adam_params_per_s", cpu_adam_params_per_s},
          {"cpu_norm_params_per_s", cpu_norm_params_per_s},
          {"device_adam_params_per_s", device_adam_params_per_s}};
}

}  // namespace ferry::offload
