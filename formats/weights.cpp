// load_weights: shape and completeness checks, then a dtype-converting copy into the store.
#include "formats/weights.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

namespace ferry::formats {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Tensors a Hugging Face checkpoint may hold that Ferry's model does not: GPT-2's tied LM head and causal
// mask buffers; BERT's tied decoder, position-id buffer, pooler and next-sentence head (pre-training
// checkpoints carry them; masked-LM training does not use them).
bool ignorable(const std::string& name) {
  return name == "lm_head.weight" || name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") ||
         name == "cls.predictions.decoder.weight" || name == "cls.predictions.decoder.bias" ||
         name == "bert.embeddings.position_ids" || name.starts_with("bert.pooler.") || name.starts_with("cls.seq_relationship.");
}

// Older BERT checkpoints (bert-base-uncased among them) name LayerNorm parameters gamma and beta.
std::string canonical_name(const std::string& name) {
  if (name.ends_with("LayerNorm.gamma")) return name.substr(0, name.size() - 5) + "weight";
  if (name.ends_with("LayerNorm.beta")) return name.substr(0, name.size() - 4) + "bias";
  return name;
}

}  // namespace

namespace {

// Checks and copies the parameters found in `file`; records which it had.
void load_from(const SafetensorsFile& file, const models::ModelSpec& spec, std::span<const std::span<float>> values,
               std::set<std::string>& found) {
  std::set<std::string> wanted;
  for (const auto& p : spec.params) wanted.insert(p.name);
  for (const auto& e : file.entries()) {
    const std::string name = canonical_name(e.name);
    if (!wanted.contains(name)) {
      if (ignorable(name)) continue;
      throw std::runtime_error("weights: the checkpoint has tensor '" + e.name + "', which this model does not have");
    }
    const int i = spec.param_index(name);
    if (e.shape != spec.params[i].shape)
      throw std::runtime_error("weights: tensor '" + e.name + "' has shape " + shape_str(e.shape) +
                               " in the checkpoint; the model needs " + shape_str(spec.params[i].shape));
    const std::vector<float> values_read = file.read_f32(e.name);
    const std::span<float> into = values[static_cast<size_t>(i)];
    if (into.size() != values_read.size()) throw std::logic_error("load_weights: the view of " + name + " has another size");
    std::copy(values_read.begin(), values_read.end(), into.begin());
    found.insert(name);
  }
}

void require_all(const models::ModelSpec& spec, const std::set<std::string>& found) {
  for (const auto& p : spec.params)
    if (!found.contains(p.name)) throw std::runtime_error("weights: tensor '" + p.name + "' is missing from the checkpoint");
}

}  // namespace

void load_weights(const SafetensorsFile& file, const models::ModelSpec& spec, std::span<const std::span<float>> values) {
  std::set<std::string> found;
  load_from(file, spec, values, found);
  require_all(spec, found);
}

void load_weights(const SafetensorsFile& file, const models::ModelSpec& spec, models::ParameterStore& store) {
  load_weights(file, spec, store.value_views());
}

void load_weights(const std::filesystem::path& path, const models::ModelSpec& spec, models::ParameterStore& store) {
  load_weights(path, spec, store.value_views());
}

void load_weights(const std::filesystem::path& path, const models::ModelSpec& spec, std::span<const std::span<float>> values) {
  std::filesystem::path file = path;
  if (std::filesystem::is_directory(path)) {
    if (std::filesystem::exists(path / "model.safetensors.index.json")) {
      file = path / "model.safetensors.index.json";
    } else {
      file = path / "model.safetensors";
    }
  }
  if (!std::filesystem::exists(file))
    throw std::runtime_error("model.init_from: '" + path.string() + "' has no model.safetensors or model.safetensors.index.json");
  if (file.extension() != ".json") return load_weights(SafetensorsFile::open(file), spec, values);
  std::ifstream in(file);
  const nlohmann::json index = nlohmann::json::parse(in, nullptr, false);
  if (index.is_discarded() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw std::runtime_error(file.string() + ": not a safetensors index (no weight_map)");
  std::set<std::string> shards, found;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) throw std::runtime_error(file.string() + ": weight_map." + name + " is not a file name");
    shards.insert(shard.get<std::string>());
  }
  for (const auto& shard : shards) load_from(SafetensorsFile::open(file.parent_path() / shard), spec, values, found);
  require_all(spec, found);
}

}  // namespace ferry::formats
