// Shared by the golden tests (GPT-2, BERT, Llama): AdamW steps with clipping on the CPU path against the losses
// and gradient norms torch.optim.AdamW gave in the reference file; bf16 gradients against the fp32 reference.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <span>
#include <string>
#include <vector>

#include "cpu_optim/adamw.h"
#include "formats/safetensors.h"
#include "memory/host_buffer.h"
#include "engine/ops/cpu_runner.h"
#include "test_helpers.h"

namespace ferry::testing {

// The logits `name` as transformers returns them: each row's first V columns of the vocabulary padded inside the
// engine (models/vocab.h), V being the loss's classes. `all` holds the tensor as the engine does.
inline std::vector<float> real_logits(const std::vector<float>& all, const models::ModelSpec& spec,
                                      const std::string& name) {
  const int64_t stride = spec.tensors[spec.tensor_index(name)].shape.back();
  int64_t vocab = stride;
  for (const models::OpSpec& op : spec.ops)
    if (op.kind == models::OpKind::CrossEntropy) vocab = op.attrs.out;
  std::vector<float> real;
  for (size_t row = 0; row < all.size() / static_cast<size_t>(stride); ++row)
    real.insert(real.end(), all.begin() + row * stride, all.begin() + row * stride + vocab);
  return real;
}
inline std::vector<float> real_logits(const ops::CpuRunner& runner, const models::ModelSpec& spec,
                                      const std::string& name) {
  return real_logits(runner.tensor(name), spec, name);
}

// Parameter i's gradient `g` as transformers gives it: its real rows, each padded row's gradient checked zero.
inline std::vector<float> real_grad(const models::ModelSpec& spec, std::span<const float> g, int i) {
  const auto real = static_cast<std::ptrdiff_t>(models::numel(spec.params[i].file_shape()));
  for (auto it = g.begin() + real; it != g.end(); ++it)
    EXPECT_EQ(*it, 0.0f) << spec.params[i].name << ": a padded row's gradient at " << (it - g.begin());
  return {g.begin(), g.begin() + real};
}
inline std::vector<float> real_grad(const models::ModelSpec& spec, const models::ParameterStore& params, int i) {
  return real_grad(spec, params.grad(i), i);
}

// `runner` holds the reference batch; `params` the reference weights (changed by the steps).
inline void expect_adamw_like_torch(const formats::SafetensorsFile& ref, models::ParameterStore& params,
                                    ops::CpuRunner& runner) {
  const nlohmann::json adamw = nlohmann::json::parse(ref.metadata().at("adamw"));
  const float clip = std::stof(ref.metadata().at("grad_clip"));
  const cpu_optim::CpuAdamW optimizer(
      cpu_optim::AdamWOptions{{adamw["lr"], adamw["beta1"], adamw["beta2"], adamw["eps"], adamw["weight_decay"]}});
  const auto losses = ref.read_f32("adamw_losses");
  const auto norms = ref.read_f32("adamw_grad_norms");
  memory::HostBuffer m(params.values().size_bytes()), v(params.values().size_bytes());
  const cpu_optim::Bucket bucket{params.values(), m.as<float>(), v.as<float>(), params.grads().data(), DType::F32};
  for (int step = 1; step <= static_cast<int>(norms.size()); ++step) {
    params.zero_grads();
    const float loss = runner.forward_backward();
    EXPECT_NEAR(loss, losses[step - 1], 1e-4 * losses[step - 1]) << "before step " << step;
    const auto report = optimizer.apply({&bucket, 1}, step, adamw["lr"].get<double>(), clip);
    EXPECT_NEAR(report.grad_norm, norms[step - 1], 1e-3 * norms[step - 1]) << "grad norm at step " << step;
  }
  EXPECT_NEAR(runner.forward(), losses.back(), 1e-4 * losses.back()) << "after the last step";
}

// The gradients of a step with every tensor stored in bf16: each parameter's within `tolerance` of the largest
// entry of its fp32 reference (grad.<name>). The backward chain rounds about twice as often as the forward and
// its sums (dW over tokens) add the roundings of many terms.
inline void expect_bf16_gradients_like(const formats::SafetensorsFile& ref, const models::ModelSpec& spec,
                                       models::ParameterStore& params, const std::vector<int32_t>& tokens,
                                       const std::vector<int32_t>& targets, double tolerance) {
  models::ModelSpec bf16 = spec;
  bf16.set_precision(DType::BF16);
  ops::CpuRunner runner(bf16, params);
  runner.set_batch(tokens, targets);
  params.zero_grads();
  runner.forward_backward();
  for (int i = 0; i < params.count(); ++i)
    EXPECT_LT(max_error_of_largest(real_grad(spec, params, i), ref.read_f32("grad." + spec.params[i].name)), tolerance)
        << spec.params[i].name;
}

}  // namespace ferry::testing
