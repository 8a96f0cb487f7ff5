// CostModel: the roofline per op, and JSON in and out with every field checked.
#include "offload/cost_model.h"

#include <algorithm>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace ferry::offload {

double CostModel::op_seconds(const models::ModelSpec& spec, const models::OpSpec& op) const {
  if (profiled_op_s.size() == spec.ops.size() && &op >= spec.ops.data() && &op < spec.ops.data() + spec.ops.size())
    return profiled_op_s[static_cast<size_t>(&op - spec.ops.data())];
  return op_overhead_s + std::max(op.flops / flops_per_s, op_bytes(spec, op) / memory_bytes_per_s);
}

// Backward reads and writes its parameters' gradients (they add up over the step); it reads its outputs too
// when it adds into them, not when it produces them first (ModelSpec::writes_gradients).
double CostModel::op_bytes(const models::ModelSpec& spec, const models::OpSpec& op) const {
  const bool backward = op.pass == models::Pass::Backward;
  double bytes = 0;
  for (int p : op.params)
    bytes += double(models::numel(spec.params[p].shape)) * double(dtype_bytes(spec.precision)) * (backward ? 3 : 1);
  for (int t : op.inputs) bytes += double(tensor_bytes(spec, t));
  const bool adds = backward && !spec.writes_gradients(op);
  for (int t : op.outputs) bytes += double(tensor_bytes(spec, t)) * (adds ? 2 : 1);
  return bytes;
}

int64_t CostModel::tensor_bytes(const models::ModelSpec& spec, int tensor) const {
  const models::TensorSpec& t = spec.tensors[tensor];
  const bool probabilities = t.name.ends_with("attn.probs");  // (B, heads, T, T)
  if (fused_attention && probabilities) return models::numel(t.shape) / t.shape.back() * 4;  // an fp32 log-sum-exp per row
  return t.bytes();  // its storage: the model's precision, or its fixed dtype (ids, LayerNorm statistics, losses)
}

namespace {

// Every figure a cost model holds: a file that leaves one out would plan with a made-up default. (name and
// assumed may be left out: the file's path names it, and its figures are then taken as assumed.)
const std::vector<std::string> kRequiredKeys{"flops_per_s", "memory_bytes_per_s", "op_overhead_s", "fused_attention",
                                             "h2d", "d2h", "cpu_adam_params_per_s",
                                             "cpu_norm_params_per_s", "device_adam_params_per_s"};

void require_keys(const nlohmann::json& j, const std::string& origin) {
  std::string missing;
  for (const auto& key : kRequiredKeys)
    if (!j.contains(key)) missing += (missing.empty() ? "" : ", ") + key;
  for (const char* link : {"h2d", "d2h"})
    for (const char* key : {"gbps", "latency_s"})
      if (j.contains(link) && j[link].is_object() && !j[link].contains(key))
        missing += (missing.empty() ? "" : ", ") + std::string(link) + "." + key;
  if (!missing.empty())
    throw std::runtime_error(origin + ": the cost model lacks " + missing +
                             "; give every figure (configs/cost_models/h100-assumed.json has them all)");
}

}  // namespace

CostModel CostModel::from_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) throw std::runtime_error(origin + ": a cost model is a JSON object");
  require_keys(j, origin);
  CostModel c;
  auto number = [&](const nlohmann::json& v, const std::string& key, double& dst, double lo) {
    if (!v.is_number() || v.get<double>() < lo)
      throw std::runtime_error(origin + ": '" + key + "' must be a number >= " + nlohmann::json(lo).dump());
    dst = v.get<double>();
  };
  auto link = [&](const char* key, LinkCost& dst) {
    const auto& l = j[key];
    if (!l.is_object() || !l["gbps"].is_number() || l["gbps"].get<double>() <= 0)
      throw std::runtime_error(origin + ": '" + key + "' needs {\"gbps\": > 0, \"latency_s\": >= 0}");
    dst.gbps = l["gbps"].get<double>();
    number(l["latency_s"], std::string(key) + ".latency_s", dst.latency_s, 0);
  };
  c.name = j.value("name", origin);
  c.assumed = j.value("assumed", true);
  number(j["flops_per_s"], "flops_per_s", c.flops_per_s, 1e6);
  number(j["memory_bytes_per_s"], "memory_bytes_per_s", c.memory_bytes_per_s, 1e6);
  number(j["op_overhead_s"], "op_overhead_s", c.op_overhead_s, 0);
  number(j["cpu_adam_params_per_s"], "cpu_adam_params_per_s", c.cpu_adam_params_per_s, 1);
  number(j["device_adam_params_per_s"], "device_adam_params_per_s", c.device_adam_params_per_s, 1);
  number(j["cpu_norm_params_per_s"], "cpu_norm_params_per_s", c.cpu_norm_params_per_s, 1);
  c.cpu_compact_adam_params_per_s = kCompactAdamRatio * c.cpu_adam_params_per_s;  // a file from before it was measured
  if (j.contains("cpu_compact_adam_params_per_s"))
    number(j["cpu_compact_adam_params_per_s"], "cpu_compact_adam_params_per_s", c.cpu_compact_adam_params_per_s, 1);
  // Files of earlier builds also give activation_bytes and weight_bytes: the machine's figures do not decide the
  // bytes a tensor takes (train.precision does), so those two are ignored.
  if (!j["fused_attention"].is_boolean()) throw std::runtime_error(origin + ": 'fused_attention' must be true or false");
  c.fused_attention = j["fused_attention"].get<bool>();
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
          {"fused_attention", fused_attention},
          {"h2d", {{"gbps", h2d.gbps}, {"latency_s", h2d.latency_s}}},
          {"d2h", {{"gbps", d2h.gbps}, {"latency_s", d2h.latency_s}}},
          {"cpu_adam_params_per_s", cpu_adam_params_per_s},
          {"cpu_compact_adam_params_per_s", cpu_compact_adam_params_per_s},
          {"cpu_norm_params_per_s", cpu_norm_params_per_s},
          {"device_adam_params_per_s", device_adam_params_per_s}};
}

}  // namespace ferry::offload
