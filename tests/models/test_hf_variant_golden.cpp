// Hugging Face folders whose config.json departs from the usual choices (tests/data/make_hf_variant_reference.py):
// a BertModel with intermediate size 96, LayerNorm eps 1e-3, gelu_new and 3 token types, and a GPT2LMHeadModel
// with n_inner 40, exact GELU and eps 1e-3. The model section read from config.json builds a model that
// computes transformers' hidden states, logits and loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "formats/export.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "formats/weights.h"
#include "engine/ops/cpu_runner.h"
#include "models/registry.h"
#include "golden_helpers.h"
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
    ops::CpuRunner runner(spec, params);
    runner.set_batch(tokens, labels, mask);
    *loss = runner.forward();
    if (hidden) *hidden = runner.tensor("layer." + std::to_string(m.n_layer - 1) + ".ffn.ln.out");
    return testing::real_logits(runner, spec, "head.decoder.out");
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

// A checkpoint records the choices, and its export's config.json gives them back: the exported folder, read
// as init_from, builds the same model, and loads into it.
TEST_F(HfVariantGolden, CheckpointAndExportCarryTheChoices) {
  const auto root = testing::scratch_path("hf_variant_export");
  std::filesystem::remove_all(root);
  const models::ModelSpec spec = models::build_model(model, B, T);
  models::ParameterStore params{spec.params};
  formats::load_weights(model.init_from, spec, params, {model.init_missing});
  std::vector<float> zeros(params.values().size(), 0.0f);
  formats::save_checkpoint(root, spec, params, zeros, zeros, {1, 1, 0, 1, 0, "hash", model, "byte", {}}, 1);
  const models::ModelConfig saved = formats::read_checkpoint_state(root).first.model;
  EXPECT_EQ(models::choices_of(saved), models::choices_of(model));
  formats::export_checkpoint(root, root / "hf");
  models::ModelConfig exported;
  exported.init_from = root / "hf";
  formats::apply_hf_config(exported, {"init_from"});
  EXPECT_EQ(exported.kind, "bert");
  EXPECT_EQ(models::choices_of(exported), "intermediate_size 96, layer_norm_eps 0.001, activation gelu_tanh, type_vocab_size 3");
  EXPECT_EQ(models::build_model(exported, B, T).param_count(), spec.param_count());
  models::ParameterStore back(spec.params);
  EXPECT_TRUE(formats::load_weights(exported.init_from, spec, back).empty());
  std::filesystem::remove_all(root);
}

// GPT-2 the other way round: the exact GELU, a narrower MLP, a larger epsilon; a YAML with only init_from.
TEST(HfGpt2Variant, LogitsAndLossMatchTransformers) {
  const formats::SafetensorsFile ref = formats::SafetensorsFile::open(testing::data_path("hf_gpt2_variant_reference.safetensors"));
  models::ModelConfig model;
  model.init_from = testing::data_path("hf_gpt2_variant");
  formats::apply_hf_config(model, {"init_from"});
  EXPECT_EQ(models::choices_of(model), "intermediate_size 40, layer_norm_eps 0.001, activation gelu");
  const int64_t B = ref.find("input_ids")->shape[0], T = ref.find("input_ids")->shape[1];
  const models::ModelSpec spec = models::build_model(model, B, T);
  models::ParameterStore params{spec.params};
  EXPECT_TRUE(formats::load_weights(model.init_from, spec, params).empty());
  ops::CpuRunner runner(spec, params);
  const std::vector<int32_t> tokens = ref.read_i32("input_ids"), targets = ref.read_i32("targets");
  runner.set_batch(tokens, targets);
  const float loss = runner.forward();
  EXPECT_LT(testing::max_rel_error(testing::real_logits(runner, spec, "lm_head.out"), ref.read_f32("logits"), 1e-2),
            1e-4);
  EXPECT_NEAR(loss, ref.read_f32("loss")[0], 1e-4 * ref.read_f32("loss")[0]);
  // With GPT-2's usual tanh GELU, or its usual epsilon, the logits leave that tolerance: the test sees each.
  models::ModelConfig tanh = model, old_eps = model;
  tanh.activation = "gelu_tanh";
  old_eps.layer_norm_eps = 1e-5;
  for (const models::ModelConfig& other : {tanh, old_eps}) {
    const models::ModelSpec other_spec = models::build_model(other, B, T);
    ops::CpuRunner other_runner(other_spec, params);
    other_runner.set_batch(tokens, targets);
    other_runner.forward();
    EXPECT_GT(testing::max_rel_error(testing::real_logits(other_runner, other_spec, "lm_head.out"),
                                     ref.read_f32("logits"), 1e-2),
              3e-4)
        << models::choices_of(other);
  }
}

}  // namespace
}  // namespace ferry
