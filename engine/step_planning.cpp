// plan_for_config: the config's choices turned into a plan request; host_device_cost_model and
// cuda_device_cost_model: a device's rates and this model's op times on it.
#include "engine/step_planning.h"

#include <fmt/format.h>

#include <stdexcept>
#include <string_view>

#include "engine/device/link_rate.h"
#include "engine/device/make_device.h"
#include "engine/ops/host_cost_model.h"
#include "engine/ops/op_profile.h"
#include "engine/ops/op_workspace.h"
#include "foundation/atomic_file.h"
#include "kernels/cpu/workspace.h"

namespace ferry::engine {
namespace {

// What a profiled cost model's name gains: a file saved from it (save_cost_model) holds no op times.
constexpr std::string_view kProfiledNote = "; op times profiled on this model";

}  // namespace

offload::CostModel host_device_cost_model(const Config& cfg, const models::ModelSpec& spec, const dataset::Batch& sample,
                                          std::string* cache) {
  const bool measured = cfg.offload.cost_model.empty();
  offload::CostModel cost =
      measured ? ops::host_cost_model(cfg.threads(), cache) : offload::CostModel::load(cfg.offload.cost_model);
  cost.fused_attention = false;  // the host device's attention keeps its probabilities
  if (measured) {
    // The profiling device goes before the run's is made.
    const std::unique_ptr<device::Device> profiler = device::make_device({.kind = device::DeviceChoice::Kind::Host,
                                                                          .arena_bytes = ops::profile_arena_bytes(spec),
                                                                          .compute_threads = cfg.threads()});
    profile_on_device(*profiler, spec, sample, cost);
  }
  if (cfg.host_device.link_gbps > 0) cost.h2d.gbps = cost.d2h.gbps = cfg.host_device.link_gbps;
  return cost;
}

offload::CostModel cuda_device_cost_model(const Config& cfg, const models::ModelSpec& spec, const dataset::Batch& sample) {
  offload::CostModel cost = offload::CostModel::load(cfg.offload.cost_model);
  const auto kind = device::DeviceChoice::Kind::Cuda;
  // The profiling device goes before the run's is made: two arenas never coexist on the GPU.
  const std::unique_ptr<device::Device> profiler = device::make_device(
      {.kind = kind, .arena_bytes = ops::profile_arena_bytes(spec, ops::op_workspace_bytes(kind, spec))});
  profile_on_device(*profiler, spec, sample, cost);
  measure_machine_rates(*profiler, cfg, spec, cost);
  return cost;
}

void measure_machine_rates(device::Device& device, const Config& cfg, const models::ModelSpec& spec, offload::CostModel& cost) {
  // Copies of a bucket's size (what the step moves), or what the profiling arena holds when smaller.
  const int64_t bytes = std::min<int64_t>(cfg.bucket_bytes(), device.arena().size() / 4096 * 4096);
  cost.h2d.gbps = device::measure_link_gbps(device, device::Stream::H2D, bytes, 5);
  cost.d2h.gbps = device::measure_link_gbps(device, device::Stream::D2H, bytes, 5);
  const ops::CpuOptimizerRates cpu = ops::measure_cpu_optimizer_rates(cfg.threads(), spec.precision, true);
  cost.cpu_adam_params_per_s = cpu.adam_params_per_s, cost.cpu_norm_params_per_s = cpu.norm_params_per_s;
  cost.name += fmt::format("; links and CPU AdamW measured at start-up ({:.1f} GB/s up, {:.1f} down, {:.2g} parameters/s on {} threads)",
                           cost.h2d.gbps, cost.d2h.gbps, cost.cpu_adam_params_per_s, cfg.threads());
}

void profile_on_device(device::Device& profiler, const models::ModelSpec& spec, const dataset::Batch& sample,
                       offload::CostModel& cost) {
  // The median of 3 to 10 passes, 1 s at least: single passes on a shared machine are noisy.
  cost.profiled_op_s = ops::profile_ops(spec, profiler, sample.tokens, sample.targets, 3, 1.0, 10);
  cost.profiled_workspace_bytes = ops::op_workspace_bytes(profiler.kind(), spec);
  if (cost.profiled_workspace_bytes == 0) {
    // What the libraries' scratch needed on the compute stream's thread (the host device: oneDNN's
    // scratchpads): the plan's workspace tensor holds it.
    int64_t scratch = 0;
    profiler.run(device::Stream::Compute, "library scratch",
                 [&scratch] { scratch = kernels::cpu::workspace_bytes(kernels::cpu::Scratch::Library); });
    profiler.synchronize();
    cost.profiled_workspace_bytes = scratch;
  }
  cost.name += kProfiledNote;
}

void save_cost_model(const std::filesystem::path& path, const offload::CostModel& cost, const Config& cfg) {
  nlohmann::json saved = cost.to_json();
  std::string name = cost.name;
  if (const size_t at = name.find(kProfiledNote); at != std::string::npos) name.erase(at, kProfiledNote.size());
  saved["name"] = name + " (saved by ferry train from " + cfg.source.filename().string() + ")";
  write_file_atomically(path, saved.dump(2) + "\n", "--save-cost-model");
}

offload::PlanRequest plan_request(const Config& cfg) {
  offload::PlanRequest request;
  request.bucket_bytes = cfg.bucket_bytes();
  request.budget_bytes = cfg.offload.gpu_budget;
  request.policy = offload::parse_policy(cfg.offload.policy);
  request.checkpointing = offload::parse_checkpointing(cfg.train.activation_checkpointing);
  request.grad_accum = cfg.train.grad_accum;
  request.overlap = offload::parse_overlap(cfg.offload.overlap);
  return request;
}

offload::StepPlan plan_for_config(const Config& cfg, const models::ModelSpec& spec, const offload::CostModel& cost, int64_t budget,
                                  const std::string& policy, int64_t red_zone_bytes) {
  offload::PlanRequest request = plan_request(cfg);
  request.workspace_bytes = cost.profiled_workspace_bytes;
  if (!policy.empty()) request.policy = offload::parse_policy(policy);
  if (budget > 0) request.budget_bytes = budget;
  request.red_zone_bytes = red_zone_bytes;
  if (request.budget_bytes <= 0) {  // unset: what resident needs
    offload::PlanRequest all = request;
    all.budget_bytes = int64_t(1) << 62, all.policy = offload::Policy::Resident, all.overlap = offload::Overlap::Backward;
    request.budget_bytes = offload::plan_step(spec, cost, all).memory.layout.peak;
  }
  return offload::plan_step(spec, cost, request);
}

}  // namespace ferry::engine
