// The step plan of an experiment, decided in one place for `ferry train` and `ferry plan`: the cost model
// (a file, or the device measured and profiled), the device budget (given, or the GPU's free memory), the
// policy, activation checkpointing and the overlap of the CPU optimizer, as the config asks.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "dataset/dataset.h"
#include "engine/config.h"
#include "engine/device/cuda_devices.h"
#include "engine/device/device.h"
#include "engine/device/make_device.h"
#include "models/model_spec.h"
#include "offload/cost_model.h"
#include "offload/policies.h"

namespace ferry::engine {

// The cost model of a run on the host device: offload.cost_model when given, else the host's rates
// (measured once and cached; `cache` receives the file) with every op of `spec` profiled on `sample` on a host
// device of its own (ops::profile_ops: one op's operands at a time), and the link device.host sets.
// The GPU's cost model: this model's ops profiled on a CUDA device of its own (their times, and the workspace the
// kernels need) and this machine's links and CPU AdamW measured (measure_machine_rates), with the compute rates,
// the device AdamW's and fused attention from the file offload.cost_model names, or without one the device AdamW
// measured too (a bucket's update) and the roofline fitted to the op times (fit_roofline): a few seconds.
offload::CostModel cuda_device_cost_model(const Config& config, const models::ModelSpec& spec, const dataset::Batch& sample);
offload::CostModel host_device_cost_model(const Config& config, const models::ModelSpec& spec, const dataset::Batch& sample,
                                          std::string* cache);

// Every op of `spec` profiled on `profiler` (ops::profile_ops on `sample`; its arena holds
// ops::profile_arena_bytes(spec, ops::op_workspace_bytes(profiler.kind(), spec))) into `cost`: the op times,
// and the workspace the plan reserves: what the device's kernels declare (ops::op_workspace_bytes: the CUDA
// device's scratch), else what its libraries took while profiling (the host device's oneDNN scratchpads).
void profile_on_device(device::Device& profiler, const models::ModelSpec& spec, const dataset::Batch& sample,
                       offload::CostModel& cost);

// Into `cost` (which holds this model's op times): flops_per_s and memory_bytes_per_s as the profiled ops achieved
// them (matmuls and attention: their FLOPs over their time; every other op: the bytes it touches over its time), so
// that a measured cost model saved to a file (save_cost_model) plans other models' ops with this device's rates.
void fit_roofline(const models::ModelSpec& spec, offload::CostModel& cost);

// Into `cost`: the links' rates each way, timed on `device` with copies of a bucket's size (the arena's when
// smaller), and the CPU AdamW's rates on the run's threads with gradients and working copies in the run's
// precision, as the offloaded step runs it; the cost model's name says what was measured.
void measure_machine_rates(device::Device& device, const Config& config, const models::ModelSpec& spec, offload::CostModel& cost);

// `cost` as a file offload.cost_model reads (ferry train --save-cost-model): its rates, without the op times
// profiled for this model and batch, and a name that says where it came from.
void save_cost_model(const std::filesystem::path& path, const offload::CostModel& cost, const Config& config);

// The model a run of `config` trains: its shape at the run's batch and sequence, in its precision, with the
// parameters optim.groups freeze marked and the backward they make useless dropped (with_frozen).
models::ModelSpec training_spec(const Config& config);

// What the config asks plan_step for on `cost`: bucket size, budget (offload.gpu_budget; 0 when unset), policy,
// checkpointing, accumulation, overlap, and the workspace of `cost`'s profile. The one translation of config keys
// into a plan request.
offload::PlanRequest plan_request(const Config& config, const offload::CostModel& cost);

// The device memory policy resident peaks at for `request` (whatever its budget, policy and overlap): the budget
// of a run that gives none on the host device. With the compact state (no device AdamW), zero-offload's.
int64_t resident_peak_bytes(const models::ModelSpec& spec, const offload::CostModel& cost, offload::PlanRequest request);

// The step plan for the config on `cost`: budget `budget` (0: offload.gpu_budget; both unset: what
// resident needs), the configured policy (or `policy` when not empty), checkpointing, gradient
// accumulation and overlap. red_zone_bytes pads every device tensor (tests). A budget the policy cannot
// fit is an offload::BudgetError that says what the model needs and which key to change.
offload::StepPlan plan_for_config(const Config& config, const models::ModelSpec& spec, const offload::CostModel& cost,
                                  int64_t budget = 0, const std::string& policy = "", int64_t red_zone_bytes = 0);

// The device budget a run plans for, and in words how it was chosen (empty when given).
struct DeviceBudget {
  int64_t bytes = 0;  // 0: what resident needs (plan_for_config)
  std::string note;   // "auto: 75.30 GiB free of 79.10 GiB, less 3.96 GiB kept free (max(1 GiB, 5%))"
};
// What offload.gpu_budget: auto keeps free on a GPU of `total_bytes` beside the run: max(1 GiB, 5%).
int64_t gpu_memory_margin(int64_t total_bytes);
// `given` (--budget, or offload.gpu_budget) when > 0; else on a GPU its free memory (`memory`, read once the
// start-up profiling's device is gone) less gpu_memory_margin, and an error when nothing is left; else (the host
// device) 0: what resident needs.
DeviceBudget resolve_gpu_budget(int64_t given, device::DeviceChoice::Kind kind, const device::CudaMemory& memory);
// The same, asking this machine's first GPU for its free memory when it is needed.
DeviceBudget gpu_budget(int64_t given, device::DeviceChoice::Kind kind);

}  // namespace ferry::engine
