// The Llama family (Llama 2/3, Mistral, Qwen2, SmolLM) as a ModelSpec: pre-RMSNorm blocks, rotary positions,
// grouped-query causal attention, SwiGLU MLP, final RMSNorm, an LM head tied or its own. Parameter names and
// shapes follow LlamaForCausalLM (nn.Linear's [out, in]).
#pragma once

#include <cstdint>
#include <span>

#include "foundation/rope.h"
#include "models/model_spec.h"
#include "models/vocab.h"
#include "models/weight_init.h"

namespace ferry::models {

struct LlamaConfig {
  int n_layer = 2;
  int n_head = 4;
  int n_kv_head = 4;  // num_key_value_heads, a divisor of n_head
  int n_embd = 64;
  int vocab_size = 256;
  int seq_len = 64;             // max_position_embeddings: the longest sequence
  int intermediate = 256;       // the MLP's width (intermediate_size)
  float eps = 1e-6f;            // rms_norm_eps
  RopeScaling rope{};           // rope_theta and rope_scaling
  bool tied = false;            // tie_word_embeddings: the LM head is model.embed_tokens.weight
  bool attention_bias = false;  // q/k/v biases (Qwen2)
  int64_t vocab_multiple = kVocabMultiple;  // the engine's vocabulary padding (models/vocab.h); 1: none
};

// The spec of one training step on a batch of B sequences of T <= seq_len tokens.
ModelSpec build_llama(const LlamaConfig& config, int64_t B, int64_t T);

// Hugging Face's LlamaPreTrainedModel initialisation: every weight N(0, 0.02) (initializer_range), biases 0,
// RMSNorm gains 1. Deterministic in `seed` on every platform.
std::vector<InitRule> llama_init_rules(const ModelSpec& spec);
void init_llama(const ModelSpec& spec, std::span<const std::span<float>> values, uint64_t seed);

}  // namespace ferry::models
