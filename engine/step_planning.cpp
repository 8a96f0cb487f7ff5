// plan_for_config: the config's choices turned into a plan request; host_device_cost_model: the host's
// rates and this model's op times.
#include "engine/step_planning.h"

#include <fmt/format.h>

#include <optional>
#include <stdexcept>

#include "engine/device/host_cost_model.h"
#include "memory/host_buffer.h"

namespace ferry::engine {

offload::CostModel host_device_cost_model(const Config& cfg, models::CpuRunner& profiler, const dataset::Batch& sample,
                                          std::string* cache) {
  const bool measured = cfg.offload.cost_model.empty();
  offload::CostModel cost = measured ? device::host_cost_model(cfg.threads(), cache) : offload::CostModel::load(cfg.offload.cost_model);
  cost.weight_bytes = cost.activation_bytes = 4;  // the host device computes in fp32
  cost.fused_attention = false;
  if (measured) {
    // The fastest of 3 to 10 passes, 1 s at least: single passes on a shared machine are noisy.
    profiler.set_batch(sample.tokens, sample.targets, sample.attention_mask);
    cost.profiled_op_s = profiler.profile_ops(3, 1.0, 10);
    cost.name += "; op times profiled on this model";
  }
  if (cfg.host_device.link_gbps > 0) cost.h2d.gbps = cost.d2h.gbps = cfg.host_device.link_gbps;
  return cost;
}

offload::StepPlan plan_for_config(const Config& cfg, const models::ModelSpec& spec, const offload::CostModel& cost, int64_t budget,
                                  const std::string& policy_name, int64_t red_zone_bytes) {
  const int64_t bucket_bytes = cfg.bucket_bytes();
  const offload::Policy policy = offload::parse_policy(policy_name.empty() ? cfg.offload.policy : policy_name);
  const offload::Checkpointing checkpointing = offload::parse_checkpointing(cfg.train.activation_checkpointing);
  if (budget <= 0) budget = cfg.offload.gpu_budget;
  if (budget <= 0) {
    const offload::StepPlan all = offload::plan_step(spec, cost, bucket_bytes, int64_t(1) << 62, offload::Policy::Resident,
                                                     checkpointing, cfg.train.grad_accum);
    budget = offload::lay_out(all.problem, all.schedule, red_zone_bytes).layout.peak;
  }
  std::optional<offload::StepPlan> plan;
  try {
    plan.emplace(offload::plan_step(spec, cost, bucket_bytes, budget, policy, checkpointing, cfg.train.grad_accum));
  } catch (const offload::BudgetError& e) {
    throw std::runtime_error(fmt::format("offload.gpu_budget: {} is too small: {}; raise it{}", memory::format_bytes(budget), e.what(),
                                         checkpointing == offload::Checkpointing::Off ? " or set train.activation_checkpointing: auto" : ""));
  }
  if (cfg.offload.overlap == "delayed") {
    if (plan->schedule.optimizer_on_device && policy == offload::Policy::Resident)
      throw std::runtime_error("offload.overlap: delayed needs AdamW on the CPU; policy resident runs it on the device");
    if (!plan->schedule.optimizer_on_device) plan->schedule = offload::with_delayed_update(plan->problem, std::move(plan->schedule));
  }
  if (red_zone_bytes > 0) plan->memory = offload::lay_out(plan->problem, plan->schedule, red_zone_bytes);
  return std::move(*plan);
}

}  // namespace ferry::engine
