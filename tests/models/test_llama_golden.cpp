// The Llama family against Hugging Face transformers: a LlamaForCausalLM (grouped-query attention, its own
// head, Llama 3's rope_scaling) and a Qwen2ForCausalLM (q/k/v biases, tied head), each loaded as
// model.init_from loads a folder (config.json, then the weights): logits, loss, every gradient, bf16 storage,
// and 5 AdamW steps, from the committed reference (tests/data/make_llama_reference.py).
#include <gtest/gtest.h>

#include <cmath>

#include "engine/ops/cpu_runner.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "formats/weights.h"
#include "golden_helpers.h"
#include "models/registry.h"
#include "test_helpers.h"

namespace ferry {
namespace {

// The model of a committed folder, as model.init_from reads it: config.json fills the model section.
models::ModelConfig model_of(const std::string& folder) {
  models::ModelConfig m;
  m.init_from = testing::data_path(folder);
  formats::apply_hf_config(m, {});
  return m;
}

struct Golden : ::testing::TestWithParam<const char*> {
  std::string name = GetParam();
  formats::SafetensorsFile ref = formats::SafetensorsFile::open(testing::data_path(name + "_reference.safetensors"));
  models::ModelConfig model = model_of("hf_" + name);
  std::vector<int32_t> tokens = ref.read_i32("input_ids");
  std::vector<int32_t> targets = ref.read_i32("targets");
  int64_t B = ref.find("input_ids")->shape[0], T = ref.find("input_ids")->shape[1];
  models::ModelSpec spec = models::build_model(model, B, T);
  models::ParameterStore params{spec.params};

  void SetUp() override { formats::load_weights(model.init_from, spec, params); }

  std::vector<float> logits_of(const models::ModelSpec& s, float* loss) {
    ops::CpuRunner runner(s, params);
    runner.set_batch(tokens, targets);
    *loss = runner.forward();
    return testing::real_logits(runner, s, "lm_head.out");
  }
};

TEST_P(Golden, ConfigJsonGivesTheArchitecture) {
  EXPECT_EQ(model.kind, "llama");
  EXPECT_EQ(model.kv_heads(), 2);
  EXPECT_EQ(model.n_head, 4);
  if (name == "llama_tiny") {
    EXPECT_EQ(model.rope_scaling.rope_type, "llama3");
    EXPECT_FALSE(model.tie_word_embeddings);
    EXPECT_NO_THROW(spec.param_index("lm_head.weight"));
  } else {
    EXPECT_TRUE(model.attention_bias);
    EXPECT_TRUE(model.tie_word_embeddings);
    EXPECT_EQ(model.rope_theta, 1e6);
    EXPECT_NO_THROW(spec.param_index("model.layers.1.self_attn.v_proj.bias"));
  }
}

TEST_P(Golden, LogitsAndLossMatchTransformers) {
  float loss = 0;
  const std::vector<float> logits = logits_of(spec, &loss);
  EXPECT_LT(testing::max_rel_error(logits, ref.read_f32("logits"), 1e-2), 1e-4);
  EXPECT_NEAR(loss, ref.read_f32("loss")[0], 1e-4 * ref.read_f32("loss")[0]);
}

TEST_P(Golden, EveryGradientMatchesTransformers) {
  ops::CpuRunner runner(spec, params);
  runner.set_batch(tokens, targets);
  params.zero_grads();
  runner.forward_backward();
  ASSERT_EQ(ref.entries().size(), spec.params.size() + 6);  // every parameter's gradient, and nothing else of HF's
  for (int i = 0; i < params.count(); ++i) {
    const auto expected = ref.read_f32("grad." + spec.params[i].name);
    double scale = 0;  // relative to the tensor's largest gradient, as for GPT-2
    for (float g : expected) scale = std::max(scale, double(std::abs(g)));
    EXPECT_LT(testing::max_rel_error(testing::real_grad(spec, params, i), expected, scale), 1e-3)
        << spec.params[i].name;
  }
}

// Stored in bf16 (the math in fp32, RMSNorm's rstd in fp32): every stored activation, weight and gradient is
// rounded to bf16, as in GPT-2's golden test. Hugging Face's LlamaRMSNorm in bf16 also computes in fp32 and
// rounds x * rstd to bf16 before the gain's product; Ferry rounds once, after it: within the same bound.
TEST_P(Golden, Bf16LogitsAndLossMatchTransformers) {
  models::ModelSpec bf16 = spec;
  bf16.set_precision(DType::BF16);
  float loss = 0;
  const std::vector<float> logits = logits_of(bf16, &loss);
  EXPECT_LT(testing::max_error_of_largest(logits, ref.read_f32("logits")), 2e-2);
  EXPECT_NEAR(loss, ref.read_f32("loss")[0], 2e-3 * ref.read_f32("loss")[0]);
}

TEST_P(Golden, Bf16GradientsMatchTransformers) {
  testing::expect_bf16_gradients_like(ref, spec, params, tokens, targets, 5e-2);
}

TEST_P(Golden, FiveAdamWStepsWithClippingMatchTorch) {
  ops::CpuRunner runner(spec, params);
  runner.set_batch(tokens, targets);
  testing::expect_adamw_like_torch(ref, params, runner);
}

INSTANTIATE_TEST_SUITE_P(Llama, Golden, ::testing::Values("llama_tiny", "qwen2_tiny"));

}  // namespace
}  // namespace ferry
