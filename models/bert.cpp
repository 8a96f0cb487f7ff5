// BERT ModelSpec: parameters in BertForMaskedLM's order and the forward graph of one step (masked-LM loss);
// the backward pass is derived from it (models/backward.cpp).
#include "models/bert.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "models/builder.h"
#include "models/vocab.h"
#include "models/weight_init.h"

namespace ferry::models {
namespace {

// One encoder layer's parameters, each {weight, bias}.
struct Block {
  std::vector<int> query, key, value, attn_dense, attn_ln, ffn_in, ffn_out, ffn_ln;
};

Block block_params(Builder& b, int64_t l, int64_t C, int64_t F) {
  const std::string p = "bert.encoder.layer." + std::to_string(l) + ".";
  Block k;
  k.query = b.weight_and_bias(p + "attention.self.query.", {C, C}, {C});
  k.key = b.weight_and_bias(p + "attention.self.key.", {C, C}, {C});
  k.value = b.weight_and_bias(p + "attention.self.value.", {C, C}, {C});
  k.attn_dense = b.weight_and_bias(p + "attention.output.dense.", {C, C}, {C});
  k.attn_ln = b.weight_and_bias(p + "attention.output.LayerNorm.", {C}, {C});
  k.ffn_in = b.weight_and_bias(p + "intermediate.dense.", {F, C}, {F});
  k.ffn_out = b.weight_and_bias(p + "output.dense.", {C, F}, {C});
  k.ffn_ln = b.weight_and_bias(p + "output.LayerNorm.", {C}, {C});
  return k;
}

}  // namespace

ModelSpec build_bert(const BertConfig& cfg, int64_t B, int64_t T) {
  if (cfg.n_embd % cfg.n_head != 0) throw std::invalid_argument("bert: n_embd must be a multiple of n_head");
  if (T < 1 || T > cfg.seq_len) throw std::invalid_argument("bert: sequence length must be in [1, seq_len]");
  const int64_t C = cfg.n_embd, V = cfg.vocab_size, L = cfg.n_layer, F = cfg.ffn();
  Builder b("bert", {B, T, cfg.n_head, /*causal=*/false});
  b.vocab_multiple = cfg.vocab_multiple;
  const float eps = cfg.eps;
  const GeluForm gelu_form = cfg.exact_gelu ? GeluForm::Erf : GeluForm::Tanh;
  constexpr WeightLayout nn_linear = WeightLayout::OutIn;

  // Parameters, in BertForMaskedLM's order.
  const int word = b.vocab_param("bert.embeddings.word_embeddings.weight", V, {C});
  const int pos = b.param("bert.embeddings.position_embeddings.weight", {cfg.seq_len, C});
  const int type = b.param("bert.embeddings.token_type_embeddings.weight", {cfg.type_vocab_size, C});
  const std::vector<int> emb_ln = b.weight_and_bias("bert.embeddings.LayerNorm.", {C}, {C});
  std::vector<Block> blocks;
  for (int64_t l = 0; l < L; ++l) blocks.push_back(block_params(b, l, C, F));
  const int decoder_bias = b.vocab_param("cls.predictions.bias", V, {});
  const std::vector<int> head_dense = b.weight_and_bias("cls.predictions.transform.dense.", {C, C}, {C});
  const std::vector<int> head_ln = b.weight_and_bias("cls.predictions.transform.LayerNorm.", {C}, {C});

  const int tokens = b.input("tokens");
  const int targets = b.input("targets");
  const int mask = b.input("attention_mask");

  // Forward: post-LayerNorm encoder layers on the hidden states x, then the masked-LM head.
  const int emb = b.embedding("embed", {word, pos, type}, tokens);
  int x = b.layernorm("embed.ln", emb_ln, emb, eps);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "layer." + std::to_string(l) + ".";
    const Block& k = blocks[l];
    b.layer = static_cast<int>(l);
    const int q = b.linear(p + "attn.q", k.query, x, nn_linear);
    const int kk = b.linear(p + "attn.k", k.key, x, nn_linear);
    const int v = b.linear(p + "attn.v", k.value, x, nn_linear);
    const int ctx = b.attention(p + "attn", {q, kk, v, mask});
    const int attn_out = b.linear(p + "attn.dense", k.attn_dense, ctx, nn_linear);
    const int res_1 = b.residual(p + "attn.res", attn_out, x);
    const int x1 = b.layernorm(p + "attn.ln", k.attn_ln, res_1, eps);
    const int ffn_in = b.linear(p + "ffn.in", k.ffn_in, x1, nn_linear);
    const int ffn_gelu = b.gelu(p + "ffn.gelu", ffn_in, gelu_form);
    const int ffn_out = b.linear(p + "ffn.out", k.ffn_out, ffn_gelu, nn_linear);
    const int res_2 = b.residual(p + "ffn.res", ffn_out, x1);
    x = b.layernorm(p + "ffn.ln", k.ffn_ln, res_2, eps);
  }
  b.layer = -1;
  const int dense = b.linear("head.dense", head_dense, x, nn_linear);
  const int gelu = b.gelu("head.gelu", dense, gelu_form);
  const int normed = b.layernorm("head.ln", head_ln, gelu, eps);
  // The decoder is tied to the word embeddings, with its own bias.
  const int logits = b.linear("head.decoder", {word, decoder_bias}, normed, nn_linear);
  b.cross_entropy("loss", logits, targets, V);
  return std::move(b).finish();
}

std::vector<InitRule> bert_init_rules(const ModelSpec& spec) {
  std::vector<InitRule> rules;
  for (const ParamSpec& p : spec.params) {
    if (p.name.find("LayerNorm.weight") != std::string::npos) rules.push_back(InitRule::constant(1.0f));
    else if (p.name.ends_with(".bias")) rules.push_back(InitRule::constant(0.0f));
    else rules.push_back(InitRule::gaussian(0.02));
  }
  return rules;
}

void init_bert(const ModelSpec& spec, std::span<const std::span<float>> values, uint64_t seed) {
  fill_real_values(spec, bert_init_rules(spec), values, seed);  // an empty view: skipped
}

}  // namespace ferry::models
