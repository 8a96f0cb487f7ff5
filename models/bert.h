// BERT as a ModelSpec (BertForMaskedLM's shape): token + position + token-type embeddings, post-LayerNorm
// encoder blocks with bidirectional attention under a key padding mask, GELU (erf form by default), and the MLM head
// (dense, GELU, LayerNorm, decoder tied to the word embeddings plus its own bias). Parameter names and
// shapes follow BertForMaskedLM. Token types are all 0 (single-segment masked-LM training).
#pragma once

#include <cstdint>

#include "models/model_spec.h"
#include "models/parameter_store.h"
#include "models/vocab.h"
#include "models/weight_init.h"

namespace ferry::models {

struct BertConfig {
  int n_layer = 2;
  int n_head = 4;
  int n_embd = 64;         // hidden_size
  int vocab_size = 256;
  int seq_len = 64;        // max_position_embeddings
  int intermediate = 0;    // 0: 4 * n_embd
  float eps = 1e-12f;      // LayerNorm epsilon (layer_norm_eps)
  bool exact_gelu = true;  // GELU's erf form (hidden_act gelu) instead of the tanh approximation (gelu_new)
  int type_vocab_size = 2; // token-type embedding rows
  int64_t vocab_multiple = kVocabMultiple;  // the engine's vocabulary padding (models/vocab.h); 1: none
  int ffn() const { return intermediate > 0 ? intermediate : 4 * n_embd; }
};

// The spec of one training step on B sequences of T <= seq_len tokens. Inputs: "tokens" (B,T), "targets"
// (B,T: the original token at each position chosen for the loss, -100 elsewhere) and "attention_mask"
// (B,T: 1 a real token, 0 padding).
ModelSpec build_bert(const BertConfig& config, int64_t B, int64_t T);

// BERT's initialisation: N(0, 0.02) weights and embeddings, zero biases, unit LayerNorm gains.
// Deterministic in `seed` on every platform.
std::vector<InitRule> bert_init_rules(const ModelSpec& spec);
void init_bert(const ModelSpec& spec, std::span<const std::span<float>> values, uint64_t seed);
inline void init_bert(const ModelSpec& spec, ParameterStore& store, uint64_t seed) { init_bert(spec, store.value_views(), seed); }

}  // namespace ferry::models
