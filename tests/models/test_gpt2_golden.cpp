// GPT-2 against Hugging Face transformers: logits, loss, every gradient, and 5 AdamW steps with clipping,
// from the committed reference (tests/data/make_gpt2_reference.py).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "formats/safetensors.h"
#include "formats/weights.h"
#include "engine/ops/cpu_runner.h"
#include "models/gpt2.h"
#include "golden_helpers.h"
#include "test_helpers.h"

namespace ferry {
namespace {

struct Golden : ::testing::Test {
  formats::SafetensorsFile ref = formats::SafetensorsFile::open(testing::data_path("gpt2_tiny_reference.safetensors"));
  formats::SafetensorsFile weights = formats::SafetensorsFile::open(testing::data_path("gpt2_tiny.safetensors"));
  nlohmann::json cfg = nlohmann::json::parse(ref.metadata().at("config"));
  models::GptConfig gpt{cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]};
  std::vector<int32_t> tokens = ref.read_i32("input_ids");
  std::vector<int32_t> targets = ref.read_i32("targets");
  int64_t B = ref.find("input_ids")->shape[0], T = ref.find("input_ids")->shape[1];
  models::ModelSpec spec = models::build_gpt2(gpt, B, T);
  models::ParameterStore params{spec.params};

  void SetUp() override { formats::load_weights(weights, spec, params); }
};

TEST_F(Golden, LogitsAndLossMatchTransformers) {
  ops::CpuRunner runner(spec, params);
  runner.set_batch(tokens, targets);
  const float loss = runner.forward();
  const auto logits = ref.read_f32("logits");
  EXPECT_LT(testing::max_rel_error(testing::real_logits(runner, spec, "lm_head.out"), logits, 1e-2), 1e-4);
  EXPECT_NEAR(loss, ref.read_f32("loss")[0], 1e-4 * ref.read_f32("loss")[0]);
}

TEST_F(Golden, EveryGradientMatchesTransformers) {
  ops::CpuRunner runner(spec, params);
  runner.set_batch(tokens, targets);
  params.zero_grads();
  runner.forward_backward();
  for (int i = 0; i < params.count(); ++i) {
    const auto expected = ref.read_f32("grad." + spec.params[i].name);
    // Relative to the tensor's largest gradient: tiny entries carry fp32 rounding noise of the big ones.
    double scale = 0;
    for (float g : expected) scale = std::max(scale, double(std::abs(g)));
    EXPECT_LT(testing::max_rel_error(testing::real_grad(spec, params, i), expected, scale), 1e-3)
        << spec.params[i].name;
  }
}

// Stored in bf16 (activations, weights, gradients; the math in fp32): logits within 2e-2 of the largest.
// Every stored value carries bf16's rounding, up to 2^-9 (0.2%) relative, and the ~15 roundings between the
// embedding and the logits compound to about 1e-2 at worst (measured: 6.5e-3 here, 8.9e-3 for BERT). The
// loss, a mean over tokens, averages the rounding out: 2e-3 relative (measured: 6e-5).
TEST_F(Golden, Bf16LogitsAndLossMatchTransformers) {
  models::ModelSpec bf16 = spec;
  bf16.set_precision(DType::BF16);
  ops::CpuRunner runner(bf16, params);
  runner.set_batch(tokens, targets);
  const float loss = runner.forward();
  EXPECT_LT(testing::max_error_of_largest(testing::real_logits(runner, bf16, "lm_head.out"), ref.read_f32("logits")),
            2e-2);
  EXPECT_NEAR(loss, ref.read_f32("loss")[0], 2e-3 * ref.read_f32("loss")[0]);
}

// Gradients stored in bf16 (and every activation gradient on the way): within 5e-2 of each tensor's
// largest entry (measured: at most 1.8e-2 here, 1.9e-2 for BERT).
TEST_F(Golden, Bf16GradientsMatchTransformers) {
  testing::expect_bf16_gradients_like(ref, spec, params, tokens, targets, 5e-2);
}

TEST_F(Golden, FiveAdamWStepsWithClippingMatchTorch) {
  ops::CpuRunner runner(spec, params);
  runner.set_batch(tokens, targets);
  testing::expect_adamw_like_torch(ref, params, runner);
}

}  // namespace
}  // namespace ferry
