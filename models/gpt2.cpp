// GPT-2 ModelSpec: parameters in GPT2LMHeadModel's order and the forward graph of one step; the backward
// pass is derived from it (models/backward.cpp).
#include "models/gpt2.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/builder.h"
#include "models/vocab.h"
#include "models/weight_init.h"

namespace ferry::models {
namespace {

// One block's parameters, each {weight, bias}.
struct Block {
  std::vector<int> ln_1, c_attn, attn_proj, ln_2, c_fc, mlp_proj;
};

Block block_params(Builder& b, int64_t l, int64_t C, int64_t F) {
  const std::string p = "transformer.h." + std::to_string(l) + ".";
  Block k;
  k.ln_1 = b.weight_and_bias(p + "ln_1.", {C}, {C});
  k.c_attn = b.weight_and_bias(p + "attn.c_attn.", {C, 3 * C}, {3 * C});
  k.attn_proj = b.weight_and_bias(p + "attn.c_proj.", {C, C}, {C});
  k.ln_2 = b.weight_and_bias(p + "ln_2.", {C}, {C});
  k.c_fc = b.weight_and_bias(p + "mlp.c_fc.", {C, F}, {F});
  k.mlp_proj = b.weight_and_bias(p + "mlp.c_proj.", {F, C}, {C});
  return k;
}

}  // namespace

ModelSpec build_gpt2(const GptConfig& cfg, int64_t B, int64_t T) {
  if (cfg.n_embd % cfg.n_head != 0) throw std::invalid_argument("gpt2: n_embd must be a multiple of n_head");
  if (T < 1 || T > cfg.seq_len) throw std::invalid_argument("gpt2: sequence length must be in [1, seq_len]");
  const int64_t C = cfg.n_embd, V = cfg.vocab_size, L = cfg.n_layer, F = cfg.ffn();
  Builder b("gpt2", {B, T, cfg.n_head, /*causal=*/true});
  b.vocab_multiple = cfg.vocab_multiple;
  const GeluForm gelu = cfg.exact_gelu ? GeluForm::Erf : GeluForm::Tanh;

  // Parameters, in the order GPT2LMHeadModel lists them (also the order of first use in forward).
  const int wte = b.vocab_param("transformer.wte.weight", V, {C});
  const int wpe = b.param("transformer.wpe.weight", {cfg.seq_len, C});
  std::vector<Block> blocks;
  for (int64_t l = 0; l < L; ++l) blocks.push_back(block_params(b, l, C, F));
  const std::vector<int> ln_f = b.weight_and_bias("transformer.ln_f.", {C}, {C});

  const int tokens = b.input("tokens");
  const int targets = b.input("targets");

  // Forward: pre-LayerNorm blocks on the residual stream x.
  int x = b.embedding("embed", {wte, wpe}, tokens);
  for (int64_t l = 0; l < L; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    const Block& k = blocks[l];
    b.layer = static_cast<int>(l);
    const int ln_1 = b.layernorm(h + "ln_1", k.ln_1, x, cfg.eps);
    const int qkv = b.linear(h + "attn.c_attn", k.c_attn, ln_1, WeightLayout::InOut);
    const int att = b.attention(h + "attn", {qkv});
    const int att_proj = b.linear(h + "attn.c_proj", k.attn_proj, att, WeightLayout::InOut);
    const int res_1 = b.residual(h + "res_1", x, att_proj);
    const int ln_2 = b.layernorm(h + "ln_2", k.ln_2, res_1, cfg.eps);
    const int fc = b.linear(h + "mlp.c_fc", k.c_fc, ln_2, WeightLayout::InOut);
    const int fc_gelu = b.gelu(h + "mlp.gelu", fc, gelu);
    const int mlp_proj = b.linear(h + "mlp.c_proj", k.mlp_proj, fc_gelu, WeightLayout::InOut);
    x = b.residual(h + "res_2", res_1, mlp_proj);
  }
  b.layer = -1;
  const int lnf = b.layernorm("ln_f", ln_f, x, cfg.eps);
  const int logits = b.linear("lm_head", {wte}, lnf, WeightLayout::OutIn);  // tied to the token embedding
  b.cross_entropy("loss", logits, targets, V);
  return std::move(b).finish();
}

std::vector<InitRule> gpt2_init_rules(const ModelSpec& spec, const GptConfig& cfg) {
  const double proj_std = 0.02 / std::sqrt(2.0 * cfg.n_layer);
  std::vector<InitRule> rules;
  for (const ParamSpec& p : spec.params) {
    const std::string& name = p.name;
    if (name.ends_with(".bias")) rules.push_back(InitRule::constant(0.0f));
    else if (name.find(".ln_") != std::string::npos) rules.push_back(InitRule::constant(1.0f));
    else rules.push_back(InitRule::gaussian(name.ends_with("c_proj.weight") ? proj_std : 0.02));
  }
  return rules;
}

void init_gpt2(const ModelSpec& spec, const GptConfig& cfg, std::span<const std::span<float>> values, uint64_t seed) {
  fill_real_values(spec, gpt2_init_rules(spec, cfg), values, seed);  // an empty view: skipped
}

}  // namespace ferry::models
