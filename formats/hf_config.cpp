// apply_hf_config: reads GPT2Config, BertConfig or LlamaConfig (Mistral's, Qwen2's) keys from config.json into
// the model section, where the YAML does not state them, and refuses what Ferry's models do not compute.
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
  std::string model_name() const { return m_.kind == "bert" ? "BERT" : m_.kind == "llama" ? "Llama" : "GPT-2"; }
  models::ModelConfig& model() { return m_; }

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
    if (v != "gpt2" && v != "bert" && !is_llama(v))
      fail("model_type", "; Ferry loads gpt2, bert and the Llama family (llama, mistral, qwen2) only");
    const std::string kind = is_llama(v) ? "llama" : v.get<std::string>();
    if (!stated("kind")) m_.kind = kind;
    if (kind != m_.kind)
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

  void eps(const char* key, const char* yaml_key = "layer_norm_eps",
           double models::ModelConfig::*field = &models::ModelConfig::layer_norm_eps) {
    if (!has(key)) return;
    const json& v = at(key);
    if (!v.is_number() || !(v.get<double>() >= models::kSmallestEps && v.get<double>() <= 1))
      fail(key, fmt::format(", not a number in [{:g}, 1] (a smaller epsilon vanishes in fp32, and 0 / 0 is NaN)",
                            models::kSmallestEps));
    const double value = v.get<double>();
    if (!stated(yaml_key)) m_.*field = value;
    else if (std::abs(m_.norm_eps() - value) > 1e-9 * value)
      conflict(key, yaml_key, fmt::format("{:g}", m_.norm_eps()), fmt::format("{:g}", value));
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

  // A number (rope_theta, a rope_scaling factor) from `from` (config.json, or its rope object), unless stated.
  void number(const json& from, const std::string& key, const std::string& yaml_key, double& field, double lo,
              double hi) {
    if (!from.contains(key)) return;
    const json& v = from.at(key);
    if (!v.is_number() || !(v.get<double>() >= lo && v.get<double>() <= hi))
      throw std::runtime_error(fmt::format("{} is {}, not a number in [{:g}, {:g}]", where(key), v.dump(), lo, hi));
    const double value = v.get<double>();
    if (!stated(yaml_key)) field = value;
    else if (std::abs(field - value) > 1e-9 * std::abs(value))
      conflicts_.push_back(
          {fmt::format("{} is {}, and model.{} is {:g}", key, v.dump(), yaml_key, field),
           fmt::format("remove model.{} (config.json then sets it) or set it to {:g}", yaml_key, value)});
  }
  // A name (rope_scaling's rope_type) from config.json, unless stated.
  void name(const std::string& key, const std::string& yaml_key, std::string& field, const std::string& value) {
    if (!stated(yaml_key)) field = value;
    else if (field != value)
      conflicts_.push_back(
          {fmt::format("{} is \"{}\", and model.{} is {}", key, value, yaml_key, field),
           fmt::format("remove model.{} (config.json then sets it) or set it to {}", yaml_key, value)});
  }
  void boolean(const char* key, const char* yaml_key, bool& field) {
    if (!has(key)) return;
    if (!at(key).is_boolean()) fail(key, ", not true or false");
    if (!stated(yaml_key)) field = at(key).get<bool>();
    else if (field != at(key).get<bool>()) conflict(key, yaml_key, field ? "true" : "false", at(key).dump());
  }
  // A key whose presence (non-null, non-zero, non-false) means a computation Ferry's model lacks.
  void absent(const char* key, const char* meaning) {
    if (!has(key)) return;
    const json& v = at(key);
    if (v.is_null() || v == false || v == 0 || (v.is_array() && v.empty())) return;
    fail(key, fmt::format("; Ferry's {} has no {}, so these weights would not compute what they were trained to",
                          model_name(), meaning));
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

 public:
  static bool is_llama(const json& model_type) {
    return model_type == "llama" || model_type == "mistral" || model_type == "qwen2";
  }
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

// rope_theta and rope_scaling as transformers 4 writes them, or rope_parameters as transformers 5 does (which
// takes rope_scaling where a file has both).
void read_rope(Reader& r) {
  models::ModelConfig& m = r.model();
  const bool v4 = r.has("rope_scaling") && !r.at("rope_scaling").is_null();
  const char* key = v4 || !r.has("rope_parameters") ? "rope_scaling" : "rope_parameters";
  const json none = json::object();
  const json& rope = r.has(key) && !r.at(key).is_null() ? r.at(key) : none;
  if (!rope.is_object()) r.fail(key, ", not an object");
  const json top = r.has("rope_theta") ? json{{"rope_theta", r.at("rope_theta")}} : json::object();
  r.number(rope.contains("rope_theta") ? rope : top, "rope_theta", "rope_theta", m.rope_theta, 1, 1e12);
  if (rope.empty()) return;
  const json type = rope.contains("rope_type") ? rope["rope_type"]
                    : rope.contains("type")    ? rope["type"]
                                               : json("default");
  if (type != "default" && type != "llama3")
    throw std::runtime_error(
        fmt::format("{}.rope_type is {}; Ferry's Llama computes the default rotary embeddings and Llama 3's "
                    "rope_scaling (llama3) only, so these weights would not compute what they were trained to",
                    r.where(key), type.dump()));
  r.name(std::string(key) + ".rope_type", "rope_scaling.rope_type", m.rope_scaling.rope_type, type.get<std::string>());
  models::RopeScalingConfig& s = m.rope_scaling;
  r.number(rope, "factor", "rope_scaling.factor", s.factor, 1, 1e6);
  r.number(rope, "low_freq_factor", "rope_scaling.low_freq_factor", s.low_freq_factor, 1e-6, 1e6);
  r.number(rope, "high_freq_factor", "rope_scaling.high_freq_factor", s.high_freq_factor, 1e-6, 1e6);
  double original = s.original_max_position_embeddings;
  r.number(rope, "original_max_position_embeddings", "rope_scaling.original_max_position_embeddings", original, 1,
           1 << 24);
  s.original_max_position_embeddings = static_cast<int>(original);
}

// Mistral's and Qwen2's sliding-window attention: Ferry's attention sees the whole sequence, which equals a
// window only as long as the sequence.
void check_sliding_window(Reader& r) {
  const models::ModelConfig& m = r.model();
  if (!r.has("sliding_window") || r.at("sliding_window").is_null()) return;
  if (r.has("use_sliding_window") && r.at("use_sliding_window") == false) return;  // Qwen2: off
  const json& w = r.at("sliding_window");
  if (!w.is_number_integer()) r.fail("sliding_window", ", not an integer or null");
  if (w.get<int64_t>() < m.seq_len)
    throw std::runtime_error(
        fmt::format("{} is {}, shorter than the sequence (model.seq_len {}); Ferry's attention sees the whole "
                    "sequence, which equals the window only as long as it: set model.seq_len to at most {}",
                    r.where("sliding_window"), w.get<int64_t>(), m.seq_len, w.get<int64_t>()));
}

void read_llama(Reader& r) {
  using M = models::ModelConfig;
  for (const IntKey& k : {IntKey{"num_hidden_layers", "n_layer", &M::n_layer, 1, 1024},
                          IntKey{"num_attention_heads", "n_head", &M::n_head, 1, 1024},
                          IntKey{"num_key_value_heads", "num_key_value_heads", &M::n_kv_head, 1, 1024},
                          IntKey{"hidden_size", "n_embd", &M::n_embd, 1, 65536},
                          IntKey{"vocab_size", "vocab_size", &M::vocab_size, 1, 1 << 22}})
    r.integer(k);
  // No parameter depends on max_position_embeddings: a shorter model.seq_len trains shorter sequences.
  if (r.has("max_position_embeddings") && !r.stated("seq_len"))
    r.integer({"max_position_embeddings", "seq_len", &M::seq_len, 1, 1 << 20});
  r.intermediate("intermediate_size", "hidden_size");
  r.eps("rms_norm_eps", "rms_norm_eps", &M::rms_norm_eps);
  read_rope(r);
  models::ModelConfig& m = r.model();
  if (r.has("model_type") && r.at("model_type") == "qwen2" && !r.stated("attention_bias"))
    m.attention_bias = true;  // q, k, v biases
  r.boolean("attention_bias", "attention_bias", m.attention_bias);
  r.boolean("tie_word_embeddings", "tie_word_embeddings", m.tie_word_embeddings);
  if (r.has("head_dim") && r.has("hidden_size") && r.has("num_attention_heads") && !r.at("head_dim").is_null() &&
      r.at("head_dim") != r.at("hidden_size").get<int64_t>() / r.at("num_attention_heads").get<int64_t>())
    r.fail("head_dim", "; Ferry's Llama computes with heads of hidden_size / num_attention_heads");
  for (const FixedKey& k :
       {FixedKey{"hidden_act", "silu", "SwiGLU's SiLU"}, FixedKey{"mlp_bias", false, "an MLP without biases"},
        FixedKey{"pretraining_tp", 1, "unsplit projections"}})
    r.fixed(k);
  for (const char* moe : {"num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size"})
    r.absent(moe, "mixture of experts");
  check_sliding_window(r);
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
  else if (m.kind == "llama") read_llama(r);
  else read_gpt2(r);
  r.finish();
}

std::string hf_activation_name(const std::string& activation) { return activation == "gelu_tanh" ? "gelu_new" : activation; }

}  // namespace ferry::formats
