// The model registry: the shape a config names (model.kind: gpt2 | bert) as a ModelSpec, and its
// initial weights. Every caller builds models through here, so a new kind is added in one place.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "models/model_spec.h"
#include "models/parameter_store.h"

namespace ferry::models {

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

  // The values in effect, defaults resolved.
  int mlp_width() const { return intermediate_size > 0 ? intermediate_size : 4 * n_embd; }
  double norm_eps() const { return layer_norm_eps > 0 ? layer_norm_eps : default_norm_eps(); }
  std::string gelu() const { return !activation.empty() ? activation : default_gelu(); }
  double default_norm_eps() const { return kind == "bert" ? 1e-12 : 1e-5; }
  std::string default_gelu() const { return kind == "bert" ? "gelu" : "gelu_tanh"; }
};

// The numeric choices in effect, as text ("intermediate_size 256, layer_norm_eps 1e-05, activation gelu_tanh"
// and BERT's type_vocab_size): two models with equal shapes compute alike when these are equal too.
std::string choices_of(const ModelConfig& model);

// The op list of one step on `batch` sequences of `seq` tokens, its tensors stored in `precision`.
ModelSpec build_model(const ModelConfig& model, int64_t batch, int64_t seq, DType precision = DType::F32);
// The architecture's own initialisation (GPT-2's or BERT's), deterministic in `seed`, into one fp32 view per
// parameter (spec.params order): a ParameterStore's, or the host buckets' master weights.
void init_model(const ModelConfig& model, const ModelSpec& spec, std::span<const std::span<float>> values, uint64_t seed);
void init_model(const ModelConfig& model, const ModelSpec& spec, ParameterStore& params, uint64_t seed);

}  // namespace ferry::models
