// Llama ModelSpec: parameters in LlamaForCausalLM's order and the forward graph of one step; the backward
// pass is derived from it (models/backward.cpp).
#include "models/llama.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "models/builder.h"
#include "models/vocab.h"
#include "models/weight_init.h"

namespace ferry::models {
namespace {

// One block's parameters: q, k, v each {weight} or {weight, bias}; the others {weight}.
struct Block {
  std::vector<int> q, k, v, o, gate, up, down, input_norm, post_norm;
};

Block block_params(Builder& b, const LlamaConfig& cfg, int64_t l) {
  const std::string p = "model.layers." + std::to_string(l) + ".";
  const int64_t C = cfg.n_embd, KV = C / cfg.n_head * cfg.n_kv_head, F = cfg.intermediate;
  const auto projection = [&](const std::string& name, int64_t out, bool bias) {
    return bias ? b.weight_and_bias(p + name + ".", {out, C}, {out})
                : std::vector<int>{b.param(p + name + ".weight", {out, C})};
  };
  Block k;  // LlamaDecoderLayer's order: self_attn, mlp, input_layernorm, post_attention_layernorm
  k.q = projection("self_attn.q_proj", C, cfg.attention_bias);
  k.k = projection("self_attn.k_proj", KV, cfg.attention_bias);
  k.v = projection("self_attn.v_proj", KV, cfg.attention_bias);
  k.o = {b.param(p + "self_attn.o_proj.weight", {C, C})};
  k.gate = {b.param(p + "mlp.gate_proj.weight", {F, C})};
  k.up = {b.param(p + "mlp.up_proj.weight", {F, C})};
  k.down = {b.param(p + "mlp.down_proj.weight", {C, F})};
  k.input_norm = {b.param(p + "input_layernorm.weight", {C})};
  k.post_norm = {b.param(p + "post_attention_layernorm.weight", {C})};
  return k;
}

void check(const LlamaConfig& cfg, int64_t T) {
  if (cfg.n_embd % cfg.n_head != 0) throw std::invalid_argument("llama: n_embd must be a multiple of n_head");
  if ((cfg.n_embd / cfg.n_head) % 2 != 0)
    throw std::invalid_argument("llama: the head size n_embd / n_head must be even: rotary embeddings rotate pairs");
  if (cfg.n_kv_head < 1 || cfg.n_head % cfg.n_kv_head != 0)
    throw std::invalid_argument("llama: num_key_value_heads must divide n_head (grouped-query attention)");
  if (T < 1 || T > cfg.seq_len) throw std::invalid_argument("llama: sequence length must be in [1, seq_len]");
}

}  // namespace

ModelSpec build_llama(const LlamaConfig& cfg, int64_t B, int64_t T) {
  check(cfg, T);
  const int64_t C = cfg.n_embd, V = cfg.vocab_size, L = cfg.n_layer;
  Builder b("llama", {B, T, cfg.n_head, /*causal=*/true});
  b.vocab_multiple = cfg.vocab_multiple;

  // Parameters, in the order LlamaForCausalLM lists them.
  // Only a table the LM head multiplies by is padded: an untied embedding is only gathered from.
  const int embed =
      cfg.tied ? b.vocab_param("model.embed_tokens.weight", V, {C}) : b.param("model.embed_tokens.weight", {V, C});
  std::vector<Block> blocks;
  for (int64_t l = 0; l < L; ++l) blocks.push_back(block_params(b, cfg, l));
  const int norm = b.param("model.norm.weight", {C});
  const int head = cfg.tied ? embed : b.vocab_param("lm_head.weight", V, {C});

  const int tokens = b.input("tokens");
  const int targets = b.input("targets");

  // Forward: pre-RMSNorm blocks on the residual stream x; positions enter only through q and k's rotation.
  int x = b.embedding("embed", {embed}, tokens);
  for (int64_t l = 0; l < L; ++l) {
    const std::string h = "layers." + std::to_string(l) + ".";
    const Block& k = blocks[l];
    b.layer = static_cast<int>(l);
    const int ln_1 = b.rmsnorm(h + "input_layernorm", k.input_norm, x, cfg.eps);
    const int q = b.linear(h + "self_attn.q_proj", k.q, ln_1, WeightLayout::OutIn);
    const int key = b.linear(h + "self_attn.k_proj", k.k, ln_1, WeightLayout::OutIn);
    const int v = b.linear(h + "self_attn.v_proj", k.v, ln_1, WeightLayout::OutIn);
    const int q_rot = b.rope(h + "self_attn.q_rope", q, cfg.n_head, cfg.rope);
    const int k_rot = b.rope(h + "self_attn.k_rope", key, cfg.n_kv_head, cfg.rope);
    const int att = b.attention(h + "self_attn", {q_rot, k_rot, v});
    const int o = b.linear(h + "self_attn.o_proj", k.o, att, WeightLayout::OutIn);
    const int res_1 = b.residual(h + "res_1", x, o);
    const int ln_2 = b.rmsnorm(h + "post_attention_layernorm", k.post_norm, res_1, cfg.eps);
    const int gate = b.linear(h + "mlp.gate_proj", k.gate, ln_2, WeightLayout::OutIn);
    const int up = b.linear(h + "mlp.up_proj", k.up, ln_2, WeightLayout::OutIn);
    const int act = b.swiglu(h + "mlp.act", gate, up);
    const int down = b.linear(h + "mlp.down_proj", k.down, act, WeightLayout::OutIn);
    x = b.residual(h + "res_2", res_1, down);
  }
  b.layer = -1;
  const int final_norm = b.rmsnorm("norm", {norm}, x, cfg.eps);
  const int logits = b.linear("lm_head", {head}, final_norm, WeightLayout::OutIn);
  b.cross_entropy("loss", logits, targets, V);
  return std::move(b).finish();
}

std::vector<InitRule> llama_init_rules(const ModelSpec& spec) {
  std::vector<InitRule> rules;
  for (const ParamSpec& p : spec.params) {
    if (p.name.ends_with(".bias")) rules.push_back(InitRule::constant(0.0f));
    else if (p.shape.size() == 1) rules.push_back(InitRule::constant(1.0f));  // the RMSNorm gains
    else rules.push_back(InitRule::gaussian(0.02));
  }
  return rules;
}

void init_llama(const ModelSpec& spec, std::span<const std::span<float>> values, uint64_t seed) {
  fill_real_values(spec, llama_init_rules(spec), values, seed);  // an empty view: skipped
}

}  // namespace ferry::models
