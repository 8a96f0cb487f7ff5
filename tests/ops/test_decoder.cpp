// The Decoder: a token at a time with its key/value cache, it gives the logits the whole sequence's forward
// gives at every position, for GPT-2 and the Llama family's variants (grouped-query attention, q/k/v biases,
// untied head, llama3 rope scaling); a full cache says so, and a reset starts over.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/ops/cpu_runner.h"
#include "engine/ops/decoder.h"
#include "foundation/rng.h"
#include "models/registry.h"

namespace ferry::ops {
namespace {

models::ModelConfig gpt2_config() {
  models::ModelConfig m;
  m.kind = "gpt2", m.n_layer = 2, m.n_head = 4, m.n_embd = 32, m.vocab_size = 300, m.seq_len = 12;
  return m;
}

models::ModelConfig llama_config(int kv_heads, bool bias, bool tied, bool llama3_rope) {
  models::ModelConfig m;
  m.kind = "llama", m.n_layer = 2, m.n_head = 4, m.n_embd = 32, m.vocab_size = 300, m.seq_len = 12;
  m.intermediate_size = 48, m.n_kv_head = kv_heads, m.attention_bias = bias, m.tie_word_embeddings = tied;
  if (llama3_rope) m.rope_scaling = {"llama3", 8.0, 1.0, 4.0, 4};
  return m;
}

// The logits of the whole sequence's forward, row t: what position t's token predicts.
std::vector<std::vector<float>> full_forward_logits(const models::ModelConfig& m, models::ParameterStore& params,
                                                    const std::vector<int32_t>& tokens) {
  const auto T = static_cast<int64_t>(tokens.size());
  const models::ModelSpec spec = models::build_model(m, 1, T);
  CpuRunner runner(spec, params);
  runner.set_batch(tokens, std::vector<int32_t>(tokens.size(), 0));
  runner.forward();
  const std::vector<float> all = runner.tensor("lm_head.out");
  const int64_t stride = static_cast<int64_t>(all.size()) / T;
  std::vector<std::vector<float>> rows;
  for (int64_t t = 0; t < T; ++t) rows.emplace_back(all.begin() + t * stride, all.begin() + t * stride + m.vocab_size);
  return rows;
}

double max_difference(std::span<const float> a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < b.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst;
}

void expect_decoder_like_the_full_forward(const models::ModelConfig& m, const std::string& what) {
  SCOPED_TRACE(what);
  const models::ModelSpec spec = models::build_model(m, 1, m.seq_len);
  models::ParameterStore params(spec.params);
  models::init_model(m, spec, params, 5);
  Rng rng(11);
  std::vector<int32_t> tokens(static_cast<size_t>(m.seq_len));
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(m.vocab_size)));
  const auto expected = full_forward_logits(m, params, tokens);
  Decoder decoder(m, params);
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::span<const float> logits = decoder.step(tokens[t]);
    ASSERT_EQ(logits.size(), static_cast<size_t>(m.vocab_size));
    EXPECT_LT(max_difference(logits, expected[t]), 2e-5) << "position " << t;
  }
  EXPECT_EQ(decoder.position(), m.seq_len);
  EXPECT_THROW(decoder.step(tokens[0]), std::out_of_range) << "a full cache";
  decoder.reset();
  EXPECT_LT(max_difference(decoder.step(tokens[0]), expected[0]), 2e-5) << "after reset()";
}

TEST(Decoder, GivesTheFullForwardsLogitsAtEveryPositionForGpt2) {
  expect_decoder_like_the_full_forward(gpt2_config(), "gpt2");
}

TEST(Decoder, GivesTheFullForwardsLogitsAtEveryPositionForTheLlamaFamily) {
  expect_decoder_like_the_full_forward(llama_config(0, false, false, false), "llama, as many kv heads as heads");
  expect_decoder_like_the_full_forward(llama_config(2, false, false, true), "grouped-query, llama3 rope scaling");
  expect_decoder_like_the_full_forward(llama_config(1, true, true, false), "one kv head, q/k/v biases, tied head");
}

TEST(Decoder, RefusesBertAndATokenOutsideTheVocabulary) {
  models::ModelConfig bert = gpt2_config();
  bert.kind = "bert";
  const models::ModelSpec spec = models::build_model(bert, 1, 4);
  models::ParameterStore params(spec.params);
  EXPECT_THROW(Decoder(bert, params), std::invalid_argument);
  const models::ModelConfig m = gpt2_config();
  const models::ModelSpec gpt = models::build_model(m, 1, 4);
  models::ParameterStore weights(gpt.params);
  Decoder decoder(m, weights);
  EXPECT_THROW(decoder.step(300), std::out_of_range);
}

}  // namespace
}  // namespace ferry::ops
