// BERT (BertForMaskedLM's shape) against Hugging Face transformers: logits, masked-LM loss, every gradient,
// and 5 AdamW steps with clipping, on a batch with padding, from tests/data/make_bert_reference.py.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "formats/checkpoint.h"
#include "formats/export.h"
#include "formats/safetensors.h"
#include "formats/weights.h"
#include "models/bert.h"
#include "engine/ops/cpu_runner.h"
#include "golden_helpers.h"
#include "test_helpers.h"

namespace ferry {
namespace {

struct BertGolden : ::testing::Test {
  formats::SafetensorsFile ref = formats::SafetensorsFile::open(testing::data_path("bert_tiny_reference.safetensors"));
  formats::SafetensorsFile weights = formats::SafetensorsFile::open(testing::data_path("bert_tiny.safetensors"));
  nlohmann::json cfg = nlohmann::json::parse(ref.metadata().at("config"));
  models::BertConfig bert{cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["hidden_size"], cfg["vocab_size"],
                          cfg["max_position_embeddings"], cfg["intermediate_size"]};
  std::vector<int32_t> tokens = ref.read_i32("input_ids");
  std::vector<int32_t> labels = ref.read_i32("labels");
  std::vector<int32_t> mask = ref.read_i32("attention_mask");
  int64_t B = ref.find("input_ids")->shape[0], T = ref.find("input_ids")->shape[1];
  models::ModelSpec spec = models::build_bert(bert, B, T);
  models::ParameterStore params{spec.params};

  void SetUp() override { formats::load_weights(weights, spec, params); }
};

TEST_F(BertGolden, LogitsAndLossMatchTransformers) {
  ops::CpuRunner runner(spec, params);
  runner.set_batch(tokens, labels, mask);
  const float loss = runner.forward();
  EXPECT_LT(
      testing::max_rel_error(testing::real_logits(runner, spec, "head.decoder.out"), ref.read_f32("logits"), 1e-2),
      1e-4);
  EXPECT_NEAR(loss, ref.read_f32("loss")[0], 1e-4 * ref.read_f32("loss")[0]);
}

TEST_F(BertGolden, EveryGradientMatchesTransformers) {
  ops::CpuRunner runner(spec, params);
  runner.set_batch(tokens, labels, mask);
  params.zero_grads();
  runner.forward_backward();
  for (int i = 0; i < params.count(); ++i) {
    const auto expected = ref.read_f32("grad." + spec.params[i].name);
    double scale = 0;
    for (float g : expected) scale = std::max(scale, double(std::abs(g)));
    if (spec.params[i].name.ends_with("attention.self.key.bias")) {
      // Exactly zero in exact arithmetic (a key bias shifts a query's scores by a constant, which the
      // softmax ignores); both sides hold only rounding noise.
      for (float g : params.grad(i)) EXPECT_LT(std::abs(g), 1e-7) << spec.params[i].name;
      continue;
    }
    EXPECT_LT(testing::max_rel_error(testing::real_grad(spec, params, i), expected, scale), 1e-3)
        << spec.params[i].name;
  }
}

// Stored in bf16 (activations, weights, gradients; the math in fp32): the tolerances of GPT-2's bf16
// golden tests (test_gpt2_golden.cpp says why).
TEST_F(BertGolden, Bf16LogitsAndLossMatchTransformers) {
  models::ModelSpec bf16 = spec;
  bf16.set_precision(DType::BF16);
  ops::CpuRunner runner(bf16, params);
  runner.set_batch(tokens, labels, mask);
  const float loss = runner.forward();
  EXPECT_LT(
      testing::max_error_of_largest(testing::real_logits(runner, bf16, "head.decoder.out"), ref.read_f32("logits")),
      2e-2);
  EXPECT_NEAR(loss, ref.read_f32("loss")[0], 2e-3 * ref.read_f32("loss")[0]);
}

TEST_F(BertGolden, Bf16GradientsMatchTransformers) {
  models::ModelSpec bf16 = spec;
  bf16.set_precision(DType::BF16);
  ops::CpuRunner runner(bf16, params);
  runner.set_batch(tokens, labels, mask);
  params.zero_grads();
  runner.forward_backward();
  for (int i = 0; i < params.count(); ++i) {
    const auto expected = ref.read_f32("grad." + spec.params[i].name);
    if (spec.params[i].name.ends_with("attention.self.key.bias")) {
      // Zero in exact arithmetic (see EveryGradientMatchesTransformers): bf16 rounding noise, held to the
      // same 5e-2 relative to the gradient it is noise of, the key weight's.
      std::string weight = spec.params[i].name;
      weight.replace(weight.size() - 4, 4, "weight");  // ...key.bias -> ...key.weight
      double key_weight = 0;  // the largest entry of the key weight's reference gradient
      for (float g : ref.read_f32("grad." + weight)) key_weight = std::max(key_weight, double(std::abs(g)));
      for (float g : params.grad(i)) EXPECT_LT(std::abs(g), 5e-2 * key_weight) << spec.params[i].name;
      continue;
    }
    EXPECT_LT(testing::max_error_of_largest(testing::real_grad(spec, params, i), expected), 5e-2)
        << spec.params[i].name;
  }
}

TEST_F(BertGolden, FiveAdamWStepsWithClippingMatchTorch) {
  ops::CpuRunner runner(spec, params);
  runner.set_batch(tokens, labels, mask);
  testing::expect_adamw_like_torch(ref, params, runner);
}

// A checkpoint of these weights, exported, is a BertForMaskedLM folder: the same tensors under the same
// names and a config.json with this shape (by hand: transformers loads it and gives the reference logits).
TEST_F(BertGolden, ExportsAHuggingFaceFolder) {
  const auto root = testing::scratch_path("bert_export");
  std::filesystem::remove_all(root);
  models::ModelConfig model{"bert", bert.n_layer, bert.n_head, bert.n_embd, bert.vocab_size, bert.seq_len, {}, {}};
  std::vector<float> zeros(params.values().size(), 0.0f);
  formats::save_checkpoint(root, spec, params, zeros, zeros, {1, 1, 0, 1, 0, "hash", model, "byte", {}}, 1);
  formats::export_checkpoint(root, root / "hf");
  models::ParameterStore back(spec.params);
  formats::load_weights(root / "hf", spec, back);
  for (int i = 0; i < params.count(); ++i)
    EXPECT_TRUE(std::equal(back.value(i).begin(), back.value(i).end(), params.value(i).begin())) << spec.params[i].name;
  std::ifstream in(root / "hf" / "config.json");
  const auto config = nlohmann::json::parse(in);
  EXPECT_EQ(config["architectures"][0], "BertForMaskedLM");
  for (const char* key : {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
                          "max_position_embeddings"})
    EXPECT_EQ(config[key], cfg[key]) << key;
  EXPECT_EQ(config["layer_norm_eps"], 1e-12);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace ferry
