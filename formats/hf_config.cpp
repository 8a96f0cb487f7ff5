// check_hf_config: reads GPT2Config or BertConfig keys from config.json and compares them with the model
// section and with what Ferry's GPT-2 and BERT compute.
#include "formats/hf_config.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace ferry::formats {
namespace {

using nlohmann::json;

// One config.json key that the model section also gives.
struct SharedKey {
  const char* json_key;
  const char* yaml_key;
  int value;  // the model section's
};

// What Ferry's model computes where config.json may ask for something else.
struct Fixed {
  const char* eps_key;
  double eps;
  const char* act_key;
  const char* act;
  const char* inner_key;  // the MLP's width; null or absent means 4 * hidden
};

std::string where(const std::filesystem::path& file, const std::string& key) { return file.string() + ": " + key; }

void check_shared(const std::filesystem::path& file, const json& cfg, const SharedKey& k) {
  if (!cfg.contains(k.json_key)) return;
  const json& v = cfg[k.json_key];
  if (!v.is_number_integer()) throw std::runtime_error(where(file, k.json_key) + " is " + v.dump() + ", not an integer");
  if (v.get<int64_t>() != k.value)
    throw std::runtime_error(fmt::format("{} is {}, and {} is {}: the weights have config.json's shape; set {}: {}", where(file, k.json_key),
                                         v.get<int64_t>(), k.yaml_key, k.value, k.yaml_key, v.get<int64_t>()));
}

void check_fixed(const std::filesystem::path& file, const json& cfg, const Fixed& f, int n_embd, const std::string& kind) {
  const std::string cannot = "; Ferry's " + kind + " computes with ";
  if (cfg.contains(f.eps_key)) {
    const json& eps = cfg[f.eps_key];
    if (!eps.is_number() || std::abs(eps.get<double>() - f.eps) > 1e-6 * f.eps)
      throw std::runtime_error(fmt::format("{} is {}{}{} only, so these weights would not compute what they were trained to",
                                           where(file, f.eps_key), eps.dump(), cannot, f.eps));
  }
  if (cfg.contains(f.act_key) && cfg[f.act_key] != f.act)
    throw std::runtime_error(fmt::format("{} is {}{}{} only, so these weights would not compute what they were trained to",
                                         where(file, f.act_key), cfg[f.act_key].dump(), cannot, f.act));
  if (cfg.contains(f.inner_key) && !cfg[f.inner_key].is_null() && cfg[f.inner_key] != 4 * n_embd)
    throw std::runtime_error(fmt::format("{} is {}{}an MLP 4 * hidden wide ({}) only", where(file, f.inner_key), cfg[f.inner_key].dump(),
                                         cannot, 4 * n_embd));
}

}  // namespace

std::filesystem::path hf_config_path(const std::filesystem::path& init_from) {
  const auto name = init_from.filename();
  const std::filesystem::path folder = std::filesystem::is_directory(init_from) ? init_from
                                       : name == "model.safetensors" || name == "model.safetensors.index.json" ? init_from.parent_path()
                                                                                                              : std::filesystem::path();
  if (folder.empty() || !std::filesystem::exists(folder / "config.json")) return {};
  return folder / "config.json";
}

void check_hf_config(const models::ModelConfig& m) {
  const std::filesystem::path file = hf_config_path(m.init_from);
  if (file.empty()) return;
  std::ifstream in(file);
  const json cfg = json::parse(in, nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object()) throw std::runtime_error(file.string() + ": not a JSON object (a Hugging Face config.json)");
  if (cfg.contains("model_type") && cfg["model_type"] != m.kind)
    throw std::runtime_error(fmt::format("{} is {}, and model.kind is {}: set model.kind to the checkpoint's", where(file, "model_type"),
                                         cfg["model_type"].dump(), m.kind));
  const bool bert = m.kind == "bert";
  const std::vector<SharedKey> shared =
      bert ? std::vector<SharedKey>{{"num_hidden_layers", "model.n_layer", m.n_layer},
                                    {"num_attention_heads", "model.n_head", m.n_head},
                                    {"hidden_size", "model.n_embd", m.n_embd},
                                    {"vocab_size", "model.vocab_size", m.vocab_size},
                                    {"max_position_embeddings", "model.seq_len", m.seq_len}}
           : std::vector<SharedKey>{{"n_layer", "model.n_layer", m.n_layer},
                                    {"n_head", "model.n_head", m.n_head},
                                    {"n_embd", "model.n_embd", m.n_embd},
                                    {"vocab_size", "model.vocab_size", m.vocab_size},
                                    {"n_positions", "model.seq_len", m.seq_len}};
  for (const auto& k : shared) check_shared(file, cfg, k);
  const Fixed fixed = bert ? Fixed{"layer_norm_eps", 1e-12, "hidden_act", "gelu", "intermediate_size"}
                           : Fixed{"layer_norm_epsilon", 1e-5, "activation_function", "gelu_new", "n_inner"};
  check_fixed(file, cfg, fixed, m.n_embd, bert ? "BERT" : "GPT-2");
}

}  // namespace ferry::formats
