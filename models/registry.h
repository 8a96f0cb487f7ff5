// The model registry: the shape a config names (model.kind: gpt2 | bert | llama) as a ModelSpec, and its
// initial weights. Every caller builds models through here, so a new kind is added in one place.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "foundation/rope.h"
#include "models/model_spec.h"
#include "models/parameter_store.h"
#include "models/vocab.h"
#include "models/weight_init.h"

namespace ferry::models {

// The model kinds: GPT-2 (a causal LM), BERT (a masked LM) and the Llama family (Llama 2/3, Mistral, Qwen2).
inline const std::vector<std::string> kModelKinds{"gpt2", "bert", "llama"};

// Llama's rope_scaling (config.json): "default" is none; "llama3" slows the long wavelengths by `factor`
// (foundation/rope.h).
inline const std::vector<std::string> kRopeTypes{"default", "llama3"};
struct RopeScalingConfig {
  std::string rope_type = "default";
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};

// Parts of a model that may be absent from model.init_from and keep the architecture's own initialisation
// (model.init_missing). "head": BERT's masked-LM head (cls.predictions.*), which a BertModel checkpoint
// lacks; GPT-2's head is tied to its token embedding, so it has nothing to miss.
inline const std::vector<std::string> kInitMissingParts{"head"};

// model.activation: the GELU of the MLP (and BERT's head). "gelu" is the exact form, x * Phi(x) (Hugging
// Face's gelu); "gelu_tanh" its tanh approximation (gelu_new, gelu_pytorch_tanh).
inline const std::vector<std::string> kActivations{"gelu", "gelu_tanh"};

// The smallest epsilon (LayerNorm's, AdamW's) the fp32 kernels keep: a smaller one rounds to 0, or to a
// subnormal that flush-to-zero drops, and a constant row (LayerNorm) or a weight without a gradient yet
// (AdamW's 0 / (0 + eps)) then divides by 0.
inline constexpr double kSmallestEps = 1e-30;

// The `model:` section of an experiment: the architecture and its shape.
struct ModelConfig {
  std::string kind = "gpt2";
  int n_layer = 2;
  int n_head = 4;
  int n_embd = 64;
  int vocab_size = 256;
  int seq_len = 64;  // the position table's rows (n_positions, max_position_embeddings)
  std::filesystem::path init_from;  // Hugging Face weights to start from (file, folder or sharded index)
  std::vector<std::string> init_missing{};  // parts (kInitMissingParts) init_from may lack
  // The numeric choices a Hugging Face config carries. Unset (0 or empty), each is what the architecture
  // computed with before it could be chosen, so configs that do not name them keep their meaning.
  int intermediate_size = 0;   // the MLP's width; 0: 4 * n_embd
  double layer_norm_eps = 0;   // 0: GPT-2's 1e-5, BERT's 1e-12
  std::string activation{};    // an entry of kActivations; empty: GPT-2 gelu_tanh, BERT gelu
  int type_vocab_size = 2;     // BERT's token-type embedding rows (segments)
  // Llama's (model.kind: llama), with Hugging Face LlamaConfig's defaults.
  int n_kv_head = 0;        // num_key_value_heads: grouped-query attention; 0: n_head
  double rms_norm_eps = 0;  // 0: 1e-6
  double rope_theta = 10000.0;
  RopeScalingConfig rope_scaling{};
  bool tie_word_embeddings = false;  // the LM head is the token embedding (SmolLM, Qwen2 0.5B) or its own lm_head
  bool attention_bias = false;       // q, k and v projections with biases (Qwen2)
  // The engine's vocabulary padding (models/vocab.h). Not a config key: nothing outside the engine sees it; tests
  // set 1 (no padding) to compare.
  int64_t vocab_multiple = kVocabMultiple;

  // The values in effect, defaults resolved.
  int mlp_width() const { return intermediate_size > 0 ? intermediate_size : 4 * n_embd; }
  double norm_eps() const {
    if (kind == "llama") return rms_norm_eps > 0 ? rms_norm_eps : default_norm_eps();
    return layer_norm_eps > 0 ? layer_norm_eps : default_norm_eps();
  }
  std::string gelu() const { return !activation.empty() ? activation : default_gelu(); }
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  RopeScaling rope() const;  // rope_theta and rope_scaling as the kernels take them
  double default_norm_eps() const { return kind == "bert" ? 1e-12 : kind == "llama" ? 1e-6 : 1e-5; }
  std::string default_gelu() const { return kind == "bert" ? "gelu" : "gelu_tanh"; }
};

// The numeric choices in effect, as text ("intermediate_size 256, layer_norm_eps 1e-05, activation gelu_tanh",
// BERT's type_vocab_size; Llama's intermediate_size, rms_norm_eps, kv heads, rope and head): two models with
// equal shapes compute alike when these are equal too.
std::string choices_of(const ModelConfig& model);

// The op list of one step on `batch` sequences of `seq` tokens, its tensors stored in `precision`.
ModelSpec build_model(const ModelConfig& model, int64_t batch, int64_t seq, DType precision = DType::F32);
// The architecture's own initialisation (GPT-2's, BERT's or Llama's), deterministic in `seed`, into one fp32 view per
// parameter (spec.params order): a ParameterStore's, or the host buckets' master weights. An empty view is
// skipped; every other parameter gets the values a whole-model initialisation gives it.
void init_model(const ModelConfig& model, const ModelSpec& spec, std::span<const std::span<float>> values, uint64_t seed);
void init_model(const ModelConfig& model, const ModelSpec& spec, ParameterStore& params, uint64_t seed);
// The rule each parameter starts from (spec.params order), as init_model applies them: with InitialValues, any
// elements of a parameter without the rest of the model.
std::vector<InitRule> init_rules(const ModelConfig& model, const ModelSpec& spec);

}  // namespace ferry::models
