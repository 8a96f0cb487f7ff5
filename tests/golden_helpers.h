// Shared by the golden tests (GPT-2, BERT): AdamW steps with clipping on the CPU path against the losses
// and gradient norms torch.optim.AdamW gave in the reference file.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cpu_optim/adamw.h"
#include "formats/safetensors.h"
#include "memory/host_buffer.h"
#include "engine/ops/cpu_runner.h"

namespace ferry::testing {

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

}  // namespace ferry::testing
