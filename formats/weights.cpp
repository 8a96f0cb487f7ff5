// load_weights: maps the checkpoint's names onto the model's (prefixes, old LayerNorm names), checks shapes
// and completeness, then a dtype-converting copy into the views.
#include "formats/weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "formats/model_folder.h"
#include "foundation/regular_file.h"

namespace ferry::formats {
namespace {

// Which checkpoint name each parameter was read from: a second name for one parameter is an ambiguity.
using Found = std::map<std::string, std::string>;

// The base-model prefixes of the task models' names (GPT2LMHeadModel, BertForMaskedLM): the base models
// (GPT2Model, BertModel) ship the same tensors without them. LlamaForCausalLM's is 'model.' (LlamaModel's
// names lack it), a common wrapper's prefix too: it is taken off only for a model whose names have it.
const std::vector<std::string> kPrefixes{"transformer.", "bert."};
const std::vector<std::string> kLlamaPrefixes{"model."};

const std::vector<std::string>& prefixes_of(const std::set<std::string>& wanted) {
  return wanted.contains("model.norm.weight") ? kLlamaPrefixes : kPrefixes;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Tensors a Hugging Face checkpoint may hold that Ferry's model does not: GPT-2's tied LM head and causal
// mask buffers; BERT's tied decoder, position-id buffer, pooler and next-sentence head (pre-training
// checkpoints carry them; masked-LM training does not use them); a tied Llama's lm_head.weight and the rotary
// frequencies older Llama checkpoints saved. Names in the task model's (prefixed) form.
bool ignorable(const std::string& name) {
  return name == "lm_head.weight" || name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") ||
         name.ends_with("rotary_emb.inv_freq") || name == "cls.predictions.decoder.weight" ||
         name == "cls.predictions.decoder.bias" || name == "bert.embeddings.position_ids" ||
         name.starts_with("bert.pooler.") || name.starts_with("cls.seq_relationship.");
}

// Older BERT checkpoints (bert-base-uncased among them) name LayerNorm parameters gamma and beta.
std::string canonical_name(const std::string& name) {
  if (name.ends_with("LayerNorm.gamma")) return name.substr(0, name.size() - 5) + "weight";
  if (name.ends_with("LayerNorm.beta")) return name.substr(0, name.size() - 4) + "bias";
  return name;
}

// The one place a checkpoint's name becomes the model's: as it is, or with a base-model prefix added or
// removed. Empty when no parameter has it in any form.
std::string model_name(const std::string& checkpoint_name, const std::set<std::string>& wanted) {
  const std::string name = canonical_name(checkpoint_name);
  if (wanted.contains(name)) return name;
  for (const auto& prefix : prefixes_of(wanted)) {
    if (wanted.contains(prefix + name)) return prefix + name;
    if (name.starts_with(prefix) && wanted.contains(name.substr(prefix.size()))) return name.substr(prefix.size());
  }
  return "";
}

bool ignorable_in_any_form(const std::string& checkpoint_name, const std::set<std::string>& wanted) {
  const std::string name = canonical_name(checkpoint_name);
  const auto& prefixes = prefixes_of(wanted);
  return ignorable(name) ||
         std::any_of(prefixes.begin(), prefixes.end(), [&](const auto& p) { return ignorable(p + name); });
}

// A tensor no parameter has: says which names the model reads, and when the checkpoint's first name part
// is none of them, that part (a BERT checkpoint given to a GPT-2 model, or a wrapper's prefix).
std::string unknown_tensor(const std::string& name, const models::ModelSpec& spec) {
  const bool bert = spec.kind == "bert", llama = spec.kind == "llama";
  const std::vector<std::string> roots =
      bert    ? std::vector<std::string>{"bert.", "cls.", "embeddings.", "encoder.", "pooler."}
      : llama ? std::vector<std::string>{"model.", "lm_head.", "embed_tokens.", "layers.", "norm."}
              : std::vector<std::string>{"transformer.", "lm_head.", "wte.", "wpe.", "h.", "ln_f."};
  const std::string first = name.substr(0, name.find('.') + 1);
  std::string msg = "weights: the checkpoint has tensor '" + name + "', which this model does not have";
  if (std::find(roots.begin(), roots.end(), first) != roots.end())
    return msg + " (does the model section's shape match the checkpoint's?)";
  msg += "; the checkpoint's names start with '" + first + "', and a model.kind " + spec.kind + " reads ";
  msg += bert    ? "BertForMaskedLM/BertForPreTraining names ('bert.encoder.layer.0...', 'cls.predictions...') or a "
                   "BertModel's "
                   "(the same without the 'bert.' prefix)"
         : llama ? "LlamaForCausalLM names ('model.layers.0...', 'lm_head.weight') or a LlamaModel's (the same without "
                   "the 'model.' "
                   "prefix)"
                 : "GPT2LMHeadModel names ('transformer.h.0...') or a GPT2Model's (the same without the 'transformer.' "
                   "prefix)";
  return msg;
}

// Checks and copies the parameters found in `file`; records which it had and under which name.
void load_from(const SafetensorsFile& file, const models::ModelSpec& spec, std::span<const std::span<float>> values,
               const LoadOptions& options, Found& found) {
  std::set<std::string> wanted;
  for (const auto& p : spec.params) wanted.insert(p.name);
  for (const auto& e : file.entries()) {
    const std::string name = model_name(e.name, wanted);
    if (name.empty()) {
      if (ignorable_in_any_form(e.name, wanted)) continue;
      throw std::runtime_error(unknown_tensor(e.name, spec));
    }
    if (const auto seen = found.find(name); seen != found.end() && seen->second != e.name)
      throw std::runtime_error("weights: the checkpoint has both '" + seen->second + "' and '" + e.name + "', which are the same tensor '" +
                               name + "' of this model; remove one of them");
    const int i = spec.param_index(name);
    const models::ParamSpec& param = spec.params[i];
    if (e.shape != param.file_shape())
      throw std::runtime_error("weights: tensor '" + e.name + "' has shape " + shape_str(e.shape) +
                               " in the checkpoint; the model needs " + shape_str(param.file_shape()));
    found[name] = e.name;
    const std::span<float> into = values[static_cast<size_t>(i)];
    if (into.empty() && !options.store) continue;
    std::vector<float> values_read = file.read_f32(e.name);
    values_read.resize(static_cast<size_t>(models::numel(param.shape)), 0.0f);  // a padded vocabulary's rows: zero
    if (into.empty()) {
      options.store(i, values_read);
      continue;
    }
    if (into.size() != values_read.size()) throw std::logic_error("load_weights: the view of " + name + " has another size");
    std::copy(values_read.begin(), values_read.end(), into.begin());
  }
}

// Whether parameter `name` belongs to `part` of models::kInitMissingParts.
bool in_part(const models::ModelSpec& spec, const std::string& name, const std::string& part) {
  return part == "head" && spec.kind == "bert" && name.starts_with("cls.predictions.");
}

// The parameters the checkpoint lacks, each allowed by options.init_missing; any other is an error.
std::vector<std::string> check_missing(const models::ModelSpec& spec, const Found& found, const LoadOptions& options) {
  std::vector<std::string> missing;
  for (const auto& p : spec.params) {
    if (found.contains(p.name)) continue;
    const auto allowed = [&](const std::string& part) { return in_part(spec, p.name, part); };
    if (std::any_of(options.init_missing.begin(), options.init_missing.end(), allowed)) {
      missing.push_back(p.name);
      continue;
    }
    std::string msg = "weights: tensor '" + p.name + "' is missing from the checkpoint";
    if (in_part(spec, p.name, "head"))
      msg += "; it is BERT's masked-LM head, which a BertModel checkpoint does not have: set model.init_missing: [head] "
             "to start the head from BERT's own initialisation";
    throw std::runtime_error(msg);
  }
  return missing;
}

}  // namespace

std::string parameter_of(const std::string& checkpoint_name, const models::ModelSpec& spec) {
  std::set<std::string> wanted;
  for (const auto& p : spec.params) wanted.insert(p.name);
  return model_name(checkpoint_name, wanted);
}

std::vector<std::string> load_weights(const SafetensorsFile& file, const models::ModelSpec& spec, std::span<const std::span<float>> values,
                                      const LoadOptions& options) {
  Found found;
  load_from(file, spec, values, options, found);
  return check_missing(spec, found, options);
}

std::vector<std::string> load_weights(const SafetensorsFile& file, const models::ModelSpec& spec, models::ParameterStore& store,
                                      const LoadOptions& options) {
  return load_weights(file, spec, store.value_views(), options);
}

std::vector<std::string> load_weights(const std::filesystem::path& path, const models::ModelSpec& spec, models::ParameterStore& store,
                                      const LoadOptions& options) {
  return load_weights(path, spec, store.value_views(), options);
}

WeightFiles weight_files(const std::filesystem::path& path, const std::string& what) {
  namespace fs = std::filesystem;
  constexpr const char* kIndex = "model.safetensors.index.json";
  const bool is_folder = fs::is_directory(path);
  if (const std::string why = is_folder ? "" : not_a_regular_file(path); !why.empty())
    throw std::runtime_error(fmt::format("{}: '{}' {}; name a .safetensors file, a Hugging Face model folder or its {}",
                                         what, path.string(), why, kIndex));
  const std::string name = path.filename().string();
  WeightFiles w;
  // A bare weights file under another name has no folder of its own: the files beside it may be anything's.
  if (!is_folder && name != kIndex) {
    if (name == "model.safetensors") w.folder = path.parent_path();
    w.files.push_back(path);
    return w;
  }
  const ModelFolder folder(is_folder ? path : path.parent_path(), what);
  w.folder = folder.path();
  if (is_folder && !folder.has(kIndex)) {
    if (!folder.has("model.safetensors"))
      throw std::runtime_error(
          fmt::format("{}: '{}' has no model.safetensors or {}; name the folder of a Hugging Face model (its "
                      "weights in safetensors)",
                      what, path.string(), kIndex));
    w.files.push_back(folder.file("model.safetensors"));
    return w;
  }
  const nlohmann::json index = nlohmann::json::parse(folder.read(kIndex), nullptr, false);
  const std::string shown = (folder.path() / kIndex).string();
  if (index.is_discarded() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw std::runtime_error(fmt::format("{}: '{}' is not a safetensors index (no weight_map)", what, shown));
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    if (!shard.is_string())
      throw std::runtime_error(fmt::format("{}: '{}': weight_map.{} is not a file name", what, shown, tensor));
    shards.insert(shard.get<std::string>());
  }
  for (const std::string& shard : shards) w.files.push_back(folder.file(shard, kIndex));
  return w;
}

std::vector<std::string> load_weights(const std::filesystem::path& path, const models::ModelSpec& spec,
                                      std::span<const std::span<float>> values, const LoadOptions& options) {
  Found found;
  for (const std::filesystem::path& file : weight_files(path, "model.init_from").files)
    load_from(SafetensorsFile::open(file), spec, values, options, found);
  return check_missing(spec, found, options);
}

}  // namespace ferry::formats
