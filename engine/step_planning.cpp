// plan_for_config: the config's choices turned into a plan request; host_device_cost_model and
// cuda_device_cost_model: a device's rates and this model's op times on it; resolve_gpu_budget: the budget.
#include "engine/step_planning.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string_view>

#include "engine/device/cuda_devices.h"
#include "engine/device/link_rate.h"
#include "engine/device/make_device.h"
#include "engine/group_settings.h"
#include "engine/ops/host_cost_model.h"
#include "engine/ops/op_profile.h"
#include "engine/ops/op_workspace.h"
#include "engine/parallel_planning.h"
#include "foundation/atomic_file.h"
#include "kernels/cpu/workspace.h"
#include "memory/host_buffer.h"
#include "models/registry.h"

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
  const bool measured = cfg.offload.cost_model.empty();
  offload::CostModel cost = measured ? offload::CostModel{} : offload::CostModel::load(cfg.offload.cost_model);
  const auto kind = device::DeviceChoice::Kind::Cuda;
  const int64_t workspace = ops::op_workspace_bytes(kind, spec);
  // A bucket's AdamW, as the step runs it (measured only when no file gives the rate).
  const int64_t bucket_params = std::max<int64_t>(1, cfg.bucket_bytes() / dtype_bytes(spec.precision));
  const int64_t arena =
      std::max(ops::profile_arena_bytes(spec, workspace),
               measured ? device::device_adamw_arena_bytes(bucket_params, spec.precision, workspace) : 0);
  // The profiling device goes before the run's is made: two arenas never coexist on the GPU.
  const std::unique_ptr<device::Device> profiler = device::make_device({.kind = kind, .arena_bytes = arena});
  if (measured) {
    cost.name = profiler->name() + ", measured at start-up";
    cost.assumed = false;
    cost.fused_attention = true;  // the CUDA attention keeps a log-sum-exp per row, not the probabilities
  }
  profile_on_device(*profiler, spec, sample, cost);
  measure_machine_rates(*profiler, cfg, spec, cost);
  if (measured) {
    cost.device_adam_params_per_s = device::measure_device_adamw_params_per_s(*profiler, bucket_params, spec.precision, workspace, 5);
    fit_roofline(spec, cost);
    cost.name += fmt::format("; device AdamW {:.2g} parameters/s; roofline fitted to the op times ({:.3g} TFLOP/s, {:.3g} GB/s)",
                             cost.device_adam_params_per_s, cost.flops_per_s / 1e12, cost.memory_bytes_per_s / 1e9);
  }
  return cost;
}

void fit_roofline(const models::ModelSpec& spec, offload::CostModel& cost) {
  if (cost.profiled_op_s.size() != spec.ops.size()) throw std::invalid_argument("fit_roofline: the cost model holds no op times for this model");
  // Each op's bytes as the roofline counts them: its time with unlimited math at one byte a second.
  offload::CostModel bytes_of = cost;
  bytes_of.profiled_op_s.clear(), bytes_of.flops_per_s = 1e300, bytes_of.memory_bytes_per_s = 1, bytes_of.op_overhead_s = 0;
  double flops = 0, flop_s = 0, bytes = 0, byte_s = 0;
  for (size_t i = 0; i < spec.ops.size(); ++i) {
    const models::OpSpec& op = spec.ops[i];
    if (op.kind == models::OpKind::Linear || op.kind == models::OpKind::Attention)
      flops += op.flops, flop_s += cost.profiled_op_s[i];
    else
      bytes += bytes_of.op_seconds(spec, op), byte_s += cost.profiled_op_s[i];
  }
  if (flops > 0 && flop_s > 0) cost.flops_per_s = flops / flop_s;
  if (bytes > 0 && byte_s > 0) cost.memory_bytes_per_s = bytes / byte_s;
}

void measure_machine_rates(device::Device& device, const Config& cfg, const models::ModelSpec& spec, offload::CostModel& cost) {
  // Copies of a bucket's size (what the step moves), or what the profiling arena holds when smaller.
  const int64_t bytes = std::min<int64_t>(cfg.bucket_bytes(), device.arena().size() / 4096 * 4096);
  cost.h2d.gbps = device::measure_link_gbps(device, device::Stream::H2D, bytes, 5);
  cost.d2h.gbps = device::measure_link_gbps(device, device::Stream::D2H, bytes, 5);
  const ops::CpuOptimizerRates cpu = ops::measure_cpu_optimizer_rates(cfg.threads(), spec.precision, true);
  cost.cpu_adam_params_per_s = cpu.adam_params_per_s, cost.cpu_norm_params_per_s = cpu.norm_params_per_s;
  cost.cpu_compact_adam_params_per_s = cpu.compact_adam_params_per_s;
  cost.name += fmt::format("; links and CPU AdamW measured at start-up ({:.1f} GB/s up, {:.1f} down, {:.2g} parameters/s on {} threads)",
                           cost.h2d.gbps, cost.d2h.gbps, cost.cpu_adam_params_per_s, cfg.threads());
}

void profile_on_device(device::Device& profiler, const models::ModelSpec& spec, const dataset::Batch& sample,
                       offload::CostModel& cost) {
  cost.profiled_op_s =
      ops::profile_ops(spec, profiler, sample.tokens, sample.targets);  // until the step's op time settles
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

models::ModelSpec training_spec(const Config& cfg) {
  return with_frozen(models::build_model(cfg.model, cfg.train.batch_size, cfg.sequence(), cfg.precision()),
                     cfg.optim.groups);
}

offload::PlanRequest plan_request(const Config& cfg, const offload::CostModel& cost) {
  offload::PlanRequest request;
  request.bucket_bytes = cfg.bucket_bytes();
  request.budget_bytes = cfg.offload.gpu_budget;
  request.policy = offload::parse_policy(cfg.offload.policy);
  request.checkpointing = offload::parse_checkpointing(cfg.train.activation_checkpointing);
  request.grad_accum = cfg.train.grad_accum;
  request.overlap = offload::parse_overlap(cfg.offload.overlap);
  request.workspace_bytes = cost.profiled_workspace_bytes;
  request.compact_state = cfg.optim.compact();
  request.parallel = parallel_planning();
  return request;
}

int64_t resident_peak_bytes(const models::ModelSpec& spec, const offload::CostModel& cost, offload::PlanRequest request) {
  request.budget_bytes = int64_t(1) << 62, request.overlap = offload::Overlap::Backward;
  // The compact state has no device AdamW: every weight on the device is the most it can hold.
  request.policy = request.compact_state ? offload::Policy::ZeroOffload : offload::Policy::Resident;
  return offload::plan_step(spec, cost, request).memory.layout.peak;
}

offload::StepPlan plan_for_config(const Config& cfg, const models::ModelSpec& spec, const offload::CostModel& cost, int64_t budget,
                                  const std::string& policy, int64_t red_zone_bytes) {
  offload::PlanRequest request = plan_request(cfg, cost);
  if (!policy.empty()) request.policy = offload::parse_policy(policy);
  if (budget > 0) request.budget_bytes = budget;
  request.red_zone_bytes = red_zone_bytes;
  if (request.budget_bytes <= 0) request.budget_bytes = resident_peak_bytes(spec, cost, request);  // unset: what resident needs
  return offload::plan_step(spec, cost, request);
}

// Why a margin: the free memory is read once the start-up profiling's device is gone (it loaded the kernels a step
// runs), and the run's arena is the one allocation after the read. What the arena does not hold is the run's own
// device's library handles and cuDNN's execution plans, made again with it, and whatever other processes on the GPU
// (a display, a notebook) take after the read; an arena that leaves no room for them fails, or makes a library call
// fail, in the middle of a run. Not measured yet, a judgement: at least 1 GiB, and 5% on large cards (4 GiB of 80),
// which are more often shared. A run that needs the last gigabytes sets offload.gpu_budget.
int64_t gpu_memory_margin(int64_t total_bytes) { return std::max(int64_t(1) << 30, total_bytes / 20); }

DeviceBudget resolve_gpu_budget(int64_t given, device::DeviceChoice::Kind kind, const device::CudaMemory& memory) {
  if (given > 0) return {given, ""};
  if (kind == device::DeviceChoice::Kind::Host) return {0, "unset: what resident needs"};
  const int64_t margin = gpu_memory_margin(memory.total_bytes);
  const std::string free = fmt::format("{} free of {}", memory::format_bytes(memory.free_bytes), memory::format_bytes(memory.total_bytes));
  if (memory.free_bytes <= margin)
    throw std::runtime_error(fmt::format("offload.gpu_budget: auto: the GPU has {}, within the {} kept free for other allocations "
                                         "(max(1 GiB, 5% of the GPU)); free its memory (another process holds it) or set offload.gpu_budget",
                                         free, memory::format_bytes(margin)));
  return {memory.free_bytes - margin, fmt::format("auto: {}, less {} kept free (max(1 GiB, 5%))", free, memory::format_bytes(margin))};
}

DeviceBudget gpu_budget(int64_t given, device::DeviceChoice::Kind kind) {
#ifdef FERRY_WITH_CUDA
  if (given <= 0 && kind == device::DeviceChoice::Kind::Cuda) return resolve_gpu_budget(given, kind, device::cuda_memory(0));
#endif
  return resolve_gpu_budget(given, kind, {});
}

}  // namespace ferry::engine
