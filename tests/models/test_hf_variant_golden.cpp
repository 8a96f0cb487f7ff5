// A Hugging Face BertModel folder whose config.json departs from BERT's usual choices (intermediate size 96,
// LayerNorm eps 1e-3, gelu_new, 3 token types; tests/data/make_hf_variant_reference.py): the model section
// read from config.json builds a model that computes transformers' hidden states, logits and loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "formats/weights.h"
#include "models/cpu_runner.h"
#include "models/registry.h"
#include "test_helpers.h"

namespace ferry {
namespace {

// The model section a YAML with only kind, init_from and init_missing gets.
models::ModelConfig variant_model() {
  models::ModelConfig m;
  m.kind = "bert";
  m.init_from = testing::data_path("hf_bert_variant");
  m.init_missing = {"head"};
  formats::apply_hf_config(m, {"kind", "init_from", "init_missing"});
  return m;
}

struct HfVariantGolden : ::testing::Test {
  formats::SafetensorsFile ref = formats::SafetensorsFile::open(testing::data_path("hf_bert_variant_reference.safetensors"));
  std::vector<int32_t> tokens = ref.read_i32("input_ids");
  std::vector<int32_t> labels = ref.read_i32("labels");
  std::vector<int32_t> mask = ref.read_i32("attention_mask");
  int64_t B = ref.find("input_ids")->shape[0], T = ref.find("input_ids")->shape[1];
  models::ModelConfig model = variant_model();

  // The folder's encoder, and the masked-LM head it lacks from the reference file. Returns the logits.
  std::vector<float> logits(const models::ModelConfig& m, DType precision, float* loss, std::vector<float>* hidden = nullptr) {
    models::ModelSpec spec = models::build_model(m, B, T, precision);
    models::ParameterStore params{spec.params};
    const std::vector<std::string> missing = formats::load_weights(m.init_from, spec, params, {m.init_missing});
    EXPECT_EQ(missing.size(), 5u);
    for (int i = 0; i < params.count(); ++i) {
      if (std::find(missing.begin(), missing.end(), spec.params[i].name) == missing.end()) continue;
      const std::vector<float> head = ref.read_f32(spec.params[i].name);
      std::copy(head.begin(), head.end(), params.value(i).begin());
    }
    models::CpuRunner runner(spec, params);
    runner.set_batch(tokens, labels, mask);
    *loss = runner.forward();
    if (hidden) *hidden = runner.tensor("layer." + std::to_string(m.n_layer - 1) + ".ffn.ln.out");
    return runner.tensor("head.decoder.out");
  }
};

TEST_F(HfVariantGolden, TheModelSectionComesFromConfigJson) {
  EXPECT_EQ(model.n_layer, 2);
  EXPECT_EQ(model.n_head, 4);
  EXPECT_EQ(model.n_embd, 32);
  EXPECT_EQ(model.vocab_size, 260);
  EXPECT_EQ(model.seq_len, 40);
  EXPECT_EQ(model.mlp_width(), 96);
  EXPECT_DOUBLE_EQ(model.norm_eps(), 1e-3);
  EXPECT_EQ(model.gelu(), "gelu_tanh");
  EXPECT_EQ(model.type_vocab_size, 3);
  const models::ModelSpec spec = models::build_model(model, B, T);
  const auto shape_of = [&](const std::string& name) {
    for (const auto& p : spec.params)
      if (p.name == name) return p.shape;
    return std::vector<int64_t>{};
  };
  EXPECT_EQ(shape_of("bert.encoder.layer.0.intermediate.dense.weight"), (std::vector<int64_t>{96, 32}));
  EXPECT_EQ(shape_of("bert.embeddings.token_type_embeddings.weight"), (std::vector<int64_t>{3, 32}));
}

TEST_F(HfVariantGolden, HiddenStatesLogitsAndLossMatchTransformers) {
  float loss = 0;
  std::vector<float> hidden;
  const std::vector<float> out = logits(model, DType::F32, &loss, &hidden);
  EXPECT_LT(testing::max_rel_error(hidden, ref.read_f32("hidden"), 1e-2), 1e-4);
  EXPECT_LT(testing::max_rel_error(out, ref.read_f32("logits"), 1e-2), 1e-4);
  RecordProperty("logits_max_rel_error", std::to_string(testing::max_rel_error(out, ref.read_f32("logits"), 1e-2)));
  EXPECT_NEAR(loss, ref.read_f32("loss")[0], 1e-4 * ref.read_f32("loss")[0]);
}

// Stored in bf16: the tolerances of the bf16 golden tests (test_gpt2_golden.cpp says why).
TEST_F(HfVariantGolden, Bf16LogitsAndLossMatchTransformers) {
  float loss = 0;
  const std::vector<float> out = logits(model, DType::BF16, &loss);
  EXPECT_LT(testing::max_error_of_largest(out, ref.read_f32("logits")), 2e-2);
  EXPECT_NEAR(loss, ref.read_f32("loss")[0], 2e-3 * ref.read_f32("loss")[0]);
}

// The reference tells each choice apart: with BERT's old epsilon, or its exact GELU, the logits leave the
// fp32 tolerance above (1e-4) by a margin, so that test catches a choice that is read but not honoured.
TEST_F(HfVariantGolden, EachChoiceChangesTheResult) {
  const std::vector<float> expected = ref.read_f32("logits");
  float loss = 0;
  models::ModelConfig old_eps = model;
  old_eps.layer_norm_eps = 1e-12;
  EXPECT_GT(testing::max_rel_error(logits(old_eps, DType::F32, &loss), expected, 1e-2), 3e-4);
  models::ModelConfig exact_gelu = model;
  exact_gelu.activation = "gelu";
  EXPECT_GT(testing::max_rel_error(logits(exact_gelu, DType::F32, &loss), expected, 1e-2), 3e-4);
}

}  // namespace
}  // namespace ferry
