// GPT-2 as a ModelSpec: pre-LayerNorm blocks, causal self-attention, GELU (tanh by default), learned
// positions, final LayerNorm, LM head tied to the token embedding. Parameter names and shapes follow GPT2LMHeadModel.
#pragma once

#include <cstdint>

#include "models/model_spec.h"
#include "models/parameter_store.h"
#include "models/vocab.h"
#include "models/weight_init.h"

namespace ferry::models {

struct GptConfig {
  int n_layer = 2;
  int n_head = 4;
  int n_embd = 64;
  int vocab_size = 256;
  int seq_len = 64;  // context length: rows of the position embedding
  int intermediate = 0;       // the MLP's width (n_inner); 0: 4 * n_embd
  float eps = 1e-5f;          // LayerNorm epsilon (layer_norm_epsilon)
  bool exact_gelu = false;    // GELU's erf form (activation_function gelu) instead of gelu_new's tanh
  int64_t vocab_multiple = kVocabMultiple;  // the engine's vocabulary padding (models/vocab.h); 1: none
  int ffn() const { return intermediate > 0 ? intermediate : 4 * n_embd; }
};

// The spec of one training step on a batch of B sequences of T <= seq_len tokens.
ModelSpec build_gpt2(const GptConfig& config, int64_t B, int64_t T);

// GPT-2's initialisation: N(0, 0.02) weights, residual projections scaled by 1/sqrt(2 n_layer), zero
// biases, unit LayerNorm gains. Deterministic in `seed` on every platform.
std::vector<InitRule> gpt2_init_rules(const ModelSpec& spec, const GptConfig& config);
void init_gpt2(const ModelSpec& spec, const GptConfig& config, std::span<const std::span<float>> values, uint64_t seed);
inline void init_gpt2(const ModelSpec& spec, const GptConfig& config, ParameterStore& store, uint64_t seed) {
  init_gpt2(spec, config, store.value_views(), seed);
}

}  // namespace ferry::models
