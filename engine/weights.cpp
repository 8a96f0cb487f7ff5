// load_weights: shape and completeness checks, then a dtype-converting copy into the store.
#include "engine/weights.h"

#include <algorithm>
#include <set>
#include <stdexcept>

namespace ferry::engine {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

bool ignorable(const std::string& name) {
  return name == "lm_head.weight" || name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

}  // namespace

void load_weights(const SafetensorsFile& file, const models::ModelSpec& spec, models::ParameterStore& store) {
  std::set<std::string> wanted;
  for (int i = 0; i < static_cast<int>(spec.params.size()); ++i) {
    const auto& p = spec.params[i];
    wanted.insert(p.name);
    const SafetensorsEntry* e = file.find(p.name);
    if (!e) throw std::runtime_error("weights: tensor '" + p.name + "' is missing from the checkpoint");
    if (e->shape != p.shape)
      throw std::runtime_error("weights: tensor '" + p.name + "' has shape " + shape_str(e->shape) +
                               " in the checkpoint; the model needs " + shape_str(p.shape));
    const std::vector<float> values = file.read_f32(p.name);
    std::copy(values.begin(), values.end(), store.value(i).begin());
  }
  for (const auto& e : file.entries())
    if (!wanted.contains(e.name) && !ignorable(e.name))
      throw std::runtime_error("weights: the checkpoint has tensor '" + e.name + "', which this model does not have");
}

}  // namespace ferry::engine
