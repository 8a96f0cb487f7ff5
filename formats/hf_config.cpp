// apply_hf_config: reads GPT2Config or BertConfig keys from config.json into the model section, where the
// YAML does not state them, and refuses what Ferry's GPT-2 and BERT do not compute.
#include "formats/hf_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "formats/model_folder.h"
#include "foundation/regular_file.h"

namespace ferry::formats {
namespace {

using nlohmann::json;

// One integer of config.json and the model-section key it fills, with that key's bounds.
struct IntKey {
  const char* json_key;
  const char* yaml_key;
  int models::ModelConfig::*field;
  int lo, hi;
};

// A choice Ferry's model makes one way only: config.json may carry it only with `value`.
struct FixedKey {
  const char* json_key;
  json value;
  const char* meaning;  // what Ferry computes instead of anything else
};

// The Hugging Face activations Ferry computes, as model.activation names them.
std::string activation_of(const std::string& hf) {
  if (hf == "gelu") return "gelu";
  if (hf == "gelu_new" || hf == "gelu_pytorch_tanh") return "gelu_tanh";
  return "";
}

class Reader {
 public:
  Reader(std::filesystem::path file, json cfg, models::ModelConfig& m, const std::vector<std::string>& stated)
      : file_(std::move(file)), cfg_(std::move(cfg)), m_(m), stated_(stated) {}

  bool has(const char* key) const { return cfg_.contains(key); }
  const json& at(const char* key) const { return cfg_.at(key); }
  bool stated(const std::string& yaml_key) const { return std::find(stated_.begin(), stated_.end(), yaml_key) != stated_.end(); }
  std::string where(const std::string& key) const { return file_.string() + ": " + key; }
  std::string model_name() const { return m_.kind == "bert" ? "BERT" : "GPT-2"; }

  [[noreturn]] void fail(const std::string& key, const std::string& problem) const {
    throw std::runtime_error(where(key) + " is " + at(key.c_str()).dump() + problem);
  }
  // A YAML value that disagrees with config.json's: the weights were trained with config.json's. Collected,
  // so that one error names them all (finish()).
  void conflict(const std::string& key, const std::string& yaml_key, const std::string& yaml_value, const std::string& json_value) {
    const std::string shorter = yaml_key == "seq_len" ? " (train.seq_len trains on shorter sequences)" : "";
    conflicts_.push_back({fmt::format("{} is {}, and model.{} is {}", key, at(key.c_str()).dump(), yaml_key, yaml_value),
                          fmt::format("remove model.{} (config.json then sets it) or set it to {}{}", yaml_key, json_value, shorter)});
  }

  // Every conflict in one error: one run clears them all.
  void finish() const {
    if (conflicts_.empty()) return;
    if (conflicts_.size() == 1)
      throw std::runtime_error(fmt::format("{}: {}: the weights were made with config.json's; {}", file_.string(), conflicts_[0].what,
                                           conflicts_[0].fix));
    std::string lines;
    for (const Conflict& c : conflicts_) lines += fmt::format("\n  {}: {}", c.what, c.fix);
    throw std::runtime_error(fmt::format("{}: {} keys differ from the model section, and the weights were made with config.json's:{}",
                                         file_.string(), conflicts_.size(), lines));
  }

  void kind() {
    if (!has("model_type")) return;
    const json& v = at("model_type");
    if (v != "gpt2" && v != "bert") fail("model_type", "; Ferry loads gpt2 and bert only");
    if (!stated("kind")) m_.kind = v.get<std::string>();
    if (v != m_.kind)
      throw std::runtime_error(fmt::format("{} is {}, and model.kind is {}: set model.kind to the checkpoint's (or remove it)",
                                           where("model_type"), v.dump(), m_.kind));
  }

  void integer(const IntKey& k) {
    if (!has(k.json_key)) return;
    const json& v = at(k.json_key);
    if (!v.is_number_integer() || v.get<int64_t>() < k.lo || v.get<int64_t>() > k.hi)
      fail(k.json_key, fmt::format(", not an integer in [{}, {}]", k.lo, k.hi));
    const int value = v.get<int>();
    if (!stated(k.yaml_key)) m_.*k.field = value;
    else if (m_.*k.field != value) conflict(k.json_key, k.yaml_key, std::to_string(m_.*k.field), std::to_string(value));
  }

  // GPT-2's n_inner may be null: 4 * hidden (config.json's, the weights'), as an unset model.intermediate_size means.
  void intermediate(const char* key, const char* hidden_key) {
    if (!has(key)) return;
    const json& v = at(key);
    if (!v.is_null() && (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (1 << 20)))
      fail(key, ", not an integer in [1, 1048576]" + std::string(m_.kind == "gpt2" ? " or null (4 * n_embd)" : ""));
    const int hidden = has(hidden_key) ? at(hidden_key).get<int>() : m_.n_embd;  // checked by integer() before
    const int width = v.is_null() ? 4 * hidden : v.get<int>();
    if (!stated("intermediate_size")) m_.intermediate_size = v.is_null() ? 0 : width;
    else if (m_.mlp_width() != width) conflict(key, "intermediate_size", std::to_string(m_.mlp_width()), std::to_string(width));
  }

  void eps(const char* key) {
    if (!has(key)) return;
    const json& v = at(key);
    if (!v.is_number() || !(v.get<double>() >= models::kSmallestEps && v.get<double>() <= 1))
      fail(key, fmt::format(", not a number in [{:g}, 1] (a smaller epsilon vanishes in fp32, and 0 / 0 is NaN)",
                            models::kSmallestEps));
    const double value = v.get<double>();
    if (!stated("layer_norm_eps")) m_.layer_norm_eps = value;
    else if (std::abs(m_.norm_eps() - value) > 1e-9 * value)
      conflict(key, "layer_norm_eps", fmt::format("{:g}", m_.norm_eps()), fmt::format("{:g}", value));
  }

  void activation(const char* key) {
    if (!has(key)) return;
    const json& v = at(key);
    const std::string ours = v.is_string() ? activation_of(v.get<std::string>()) : "";
    if (ours.empty())
      fail(key, fmt::format("; Ferry's {} computes GELU only: gelu (the exact form) or gelu_new / gelu_pytorch_tanh (its tanh "
                            "approximation), so these weights would not compute what they were trained to",
                            model_name()));
    if (!stated("activation")) m_.activation = ours;
    else if (m_.gelu() != ours) conflict(key, "activation", m_.gelu(), ours);
  }

  void fixed(const FixedKey& k) {
    if (has(k.json_key) && at(k.json_key) != k.value)
      fail(k.json_key, fmt::format("; Ferry's {} computes only with {}: {} ({}), so these weights would not compute what they were "
                                   "trained to",
                                   model_name(), k.json_key, k.value.dump(), k.meaning));
  }

 private:
  struct Conflict {
    std::string what, fix;
  };
  std::filesystem::path file_;
  json cfg_;
  models::ModelConfig& m_;
  const std::vector<std::string>& stated_;
  std::vector<Conflict> conflicts_;
};

void read_gpt2(Reader& r) {
  using M = models::ModelConfig;
  for (const IntKey& k : {IntKey{"n_layer", "n_layer", &M::n_layer, 1, 1024}, IntKey{"n_head", "n_head", &M::n_head, 1, 1024},
                          IntKey{"n_embd", "n_embd", &M::n_embd, 1, 65536}, IntKey{"vocab_size", "vocab_size", &M::vocab_size, 1, 1 << 22},
                          IntKey{"n_positions", "seq_len", &M::seq_len, 1, 1 << 20}})
    r.integer(k);
  r.intermediate("n_inner", "n_embd");
  r.eps("layer_norm_epsilon");
  r.activation("activation_function");
  for (const FixedKey& k : {FixedKey{"tie_word_embeddings", true, "the LM head is the token embedding"},
                            FixedKey{"add_cross_attention", false, "no cross-attention"},
                            FixedKey{"scale_attn_weights", true, "attention scores scaled by 1/sqrt(head size)"},
                            FixedKey{"scale_attn_by_inverse_layer_idx", false, "no scaling by layer index"}})
    r.fixed(k);
}

void read_bert(Reader& r) {
  using M = models::ModelConfig;
  for (const IntKey& k : {IntKey{"num_hidden_layers", "n_layer", &M::n_layer, 1, 1024},
                          IntKey{"num_attention_heads", "n_head", &M::n_head, 1, 1024},
                          IntKey{"hidden_size", "n_embd", &M::n_embd, 1, 65536},
                          IntKey{"vocab_size", "vocab_size", &M::vocab_size, 1, 1 << 22},
                          IntKey{"max_position_embeddings", "seq_len", &M::seq_len, 1, 1 << 20},
                          IntKey{"type_vocab_size", "type_vocab_size", &M::type_vocab_size, 1, 1024}})
    r.integer(k);
  r.intermediate("intermediate_size", "hidden_size");
  r.eps("layer_norm_eps");
  r.activation("hidden_act");
  for (const FixedKey& k : {FixedKey{"tie_word_embeddings", true, "the masked-LM decoder is the word embedding"},
                            FixedKey{"position_embedding_type", "absolute", "learned absolute positions"},
                            FixedKey{"is_decoder", false, "bidirectional attention"},
                            FixedKey{"add_cross_attention", false, "no cross-attention"}})
    r.fixed(k);
}

}  // namespace

std::filesystem::path hf_config_path(const std::filesystem::path& init_from) {
  const auto name = init_from.filename();
  const bool folder = std::filesystem::is_directory(init_from);
  if (!folder && name != "model.safetensors" && name != "model.safetensors.index.json") return {};
  const ModelFolder source(folder ? init_from : init_from.parent_path(),
                           "");  // engine/config.cpp names model.init_from
  return source.has("config.json") ? source.file("config.json") : std::filesystem::path();
}

void apply_hf_config(models::ModelConfig& m, const std::vector<std::string>& stated) {
  const std::filesystem::path file = hf_config_path(m.init_from);
  if (file.empty()) return;
  json cfg = json::parse(read_regular_file(file, ""), nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object()) throw std::runtime_error(file.string() + ": not a JSON object (a Hugging Face config.json)");
  Reader r(file, std::move(cfg), m, stated);
  r.kind();
  if (m.kind == "bert") read_bert(r);
  else read_gpt2(r);
  r.finish();
}

std::string hf_activation_name(const std::string& activation) { return activation == "gelu_tanh" ? "gelu_new" : activation; }

}  // namespace ferry::formats
