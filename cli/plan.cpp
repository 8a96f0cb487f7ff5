// `ferry plan`: its options, and print_plan: builds the offload problem of the config's model, plans it with
// every policy, reports.
#include "cli/plan.h"
#include "cli/plan_target.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli/commands.h"
#include "engine/ops/host_cost_model.h"
#include "engine/device/make_device.h"
#include "engine/ops/op_profile.h"
#include "engine/host_memory.h"
#include "engine/step_planning.h"
#include "engine/trainer.h"
#include "foundation/atomic_file.h"
#include "foundation/output_paths.h"
#include "models/registry.h"
#include "memory/host_buffer.h"
#include "offload/policies.h"
#include "foundation/console.h"

namespace ferry::cli {
namespace {

// A batch for profiling without reading the data: the time of an op does not depend on which ids it reads, so
// they are spread over the vocabulary (BERT: one position in seven labelled, as masked-LM labels are).
dataset::Batch synthetic_batch(const engine::Config& cfg, const models::ModelSpec& spec) {
  dataset::Batch b;
  const int64_t n = int64_t(cfg.train.batch_size) * cfg.sequence();
  for (int64_t i = 0; i < n; ++i) {
    b.tokens.push_back(static_cast<int32_t>((i * 7919) % cfg.model.vocab_size));
    b.targets.push_back(spec.kind == "bert" && i % 7 ? -100 : b.tokens.back());
  }
  return b;
}

// The longest pass over a model's ops (by the roofline: ops::ops_profiled_in_place_of's, one block's and the
// ends') that `ferry plan` profiles as `ferry train` does, in a warm-up pass and six passes or a second at least.
constexpr double kQuickToProfile_s = 1.0;

// The host device's cost model for the plan: the op times `ferry train` profiles at start-up when that is quick,
// so that it predicts the step `ferry train` predicts (within the spread of two profiles); else the roofline of
// the machine's measured rates, said so.
offload::CostModel host_cost_model_for(const engine::Config& cfg, const models::ModelSpec& spec, std::string* cache) {
  offload::CostModel roofline = ops::host_cost_model(cfg.threads(), cache);
  const std::vector<int> profiled_in_place_of = ops::ops_profiled_in_place_of(spec);
  double pass_s = 0;
  for (size_t i = 0; i < spec.ops.size(); ++i)
    if (profiled_in_place_of[i] == static_cast<int>(i)) pass_s += roofline.op_seconds(spec, spec.ops[i]);
  if (pass_s > kQuickToProfile_s) {
    roofline.name += fmt::format("; op times from its matmul and memory rates, not profiled (about {:.0f} s a pass over the ops; "
                                 "ferry train profiles them at start-up)", pass_s);
    return roofline;
  }
  return engine::host_device_cost_model(cfg, spec, synthetic_batch(cfg, spec), cache);
}

// The chosen policy's plan in words. Returns the host memory the run will need.
engine::HostMemoryEstimate print_chosen(const engine::Config& cfg, const models::ModelSpec& spec, const offload::StepPlan& plan,
                                        const offload::SimResult& r, double bound, const offload::PlanRequest& request,
                                        const PlanTarget& target, nlohmann::json& j) {
  console::print("device memory: peak {} of the {} budget\n", memory::format_bytes(r.peak_device_bytes),
                 memory::format_bytes(request.budget_bytes));
  console::print("plan: {}; overlap {}\n", plan.schedule.label(),
                 plan.overlap_note.empty() ? offload::to_string(request.overlap) : plan.overlap_note);
  console::print("activation checkpointing ({}): {} of {} blocks\n", cfg.train.activation_checkpointing,
                 plan.problem.checkpointed_layers, cfg.model.n_layer);
  const offload::TierTotals tiers = offload::tier_totals(plan.problem, plan.schedule);
  std::string line = "tiers:";
  for (offload::Tier t : {offload::Tier::Device, offload::Tier::WeightsResident, offload::Tier::Streamed}) {
    const int i = static_cast<int>(t);
    line += fmt::format(" {} {:.1f}M parameters, {} (AdamW on the {}){}", offload::to_string(t), tiers.params[i] / 1e6,
                        memory::format_bytes(tiers.bytes[i]), t == offload::Tier::Device ? "device" : "CPU", i < 2 ? ";" : "");
    j["tiers"][offload::to_string(t)] = {{"params", tiers.params[i]}, {"weight_bytes", tiers.bytes[i]}};
  }
  console::print("{}\n", line);
  console::print("copies: {} host-to-device and {} device-to-host per step\n", memory::format_bytes(r.h2d_bytes),
                 memory::format_bytes(r.d2h_bytes));
  console::print(
      "predicted step: {:.4f} s (lower bound {:.4f} s, {:.2f}x); "
      "compute {:.4f} s, stalls {:.4f} s, CPU AdamW {:.4f} s\n",
      r.step_s, bound, r.step_s / bound, r.compute_busy_s, r.stall_s, r.cpu_busy_s);
  std::vector<int> ops(plan.problem.n_ops);
  for (int i = 0; i < plan.problem.n_ops; ++i) ops[i] = i;
  std::stable_sort(ops.begin(), ops.end(), [&](int a, int b) { return r.stall_before_op[a] > r.stall_before_op[b]; });
  for (int k = 0; k < 5 && k < plan.problem.n_ops && r.stall_before_op[ops[k]] > 0; ++k)
    console::print("  stall {:.2f} ms before {}{}\n", r.stall_before_op[ops[k]] * 1e3,
                   spec.ops[plan.problem.op_source[ops[k]]].name,
                   plan.problem.op_recompute[ops[k]] ? " (recompute)" : "");
  return engine::estimate_host_memory(spec, plan, target.host_device);
}

// The one verdict, last: the device budget, then the host memory. `host`: the chosen plan's estimate, null when
// the plan does not fit the budget (`device_error` says why). Returns the exit status: 0, or 3 when it does not fit.
int print_verdict(const std::string& device_error, const engine::HostMemoryEstimate* host, int64_t peak, int64_t budget, nlohmann::json& j) {
  std::string why = "device memory: " + device_error;
  int64_t available = -1;
  if (host) {
    available = engine::available_host_memory();
    console::print("host memory: {}; {} available\n", host->describe(),
                   available < 0 ? "unknown" : memory::format_bytes(available));
    j.update({{"host_memory_bytes", host->total()}, {"host_memory_available_bytes", available}});
    why = engine::host_memory_shortfall(*host, host->total(), available);
  }
  if (why.empty()) {
    console::print("fits: yes (device memory: peak {} of the {} budget; host memory: {} of {} available)\n",
                   memory::format_bytes(peak), memory::format_bytes(budget), memory::format_bytes(host->total()),
                   available < 0 ? "unknown" : memory::format_bytes(available));
    return 0;
  }
  console::print("fits: no: {}\n", why);
  j.update({{"fits", false}, {"error", why}});
  return 3;
}

}  // namespace

PlanTarget plan_target(const engine::Config& cfg) {
  const device::VisibleDevices seen = device::visible_devices();
  if (cfg.device != "cpu" && !cfg.offload.cost_model.empty() && (!seen.cuda_built || seen.cuda_devices == 0)) {
    const device::ResolvedDevice here = device::resolve_device("auto", seen);
    return {here, false, "the GPU offload.cost_model describes (here: " + here.note + ")"};
  }
  const device::ResolvedDevice d = device::resolve_device(cfg.device, seen);
  return {d, d.kind == device::DeviceChoice::Kind::Host, d.note};
}

offload::CostModel plan_cost_model(const engine::Config& cfg, const models::ModelSpec& spec, const PlanTarget& target,
                                   std::string* cache) {
  if (target.device.kind == device::DeviceChoice::Kind::Cuda)
    return engine::cuda_device_cost_model(cfg, spec, synthetic_batch(cfg, spec));
  if (!cfg.offload.cost_model.empty()) return offload::CostModel::load(cfg.offload.cost_model);
  return host_cost_model_for(cfg, spec, cache);
}

int print_plan(const engine::Config& cfg, const PlanOptions& opt) {
  const PlanTarget target = plan_target(cfg);
  const offload::Policy chosen = offload::parse_policy(opt.policy.empty() ? cfg.offload.policy : opt.policy);
  const models::ModelSpec spec = engine::training_spec(cfg);
  std::string cache;
  const offload::CostModel cost = plan_cost_model(cfg, spec, target, &cache);
  // As `ferry train` decides it: given, else on a GPU its free memory once the profiling is done, else what resident needs.
  const engine::DeviceBudget given = engine::gpu_budget(opt.budget > 0 ? opt.budget : cfg.offload.gpu_budget, target.device.kind);
  offload::PlanRequest request = engine::plan_request(cfg, cost);
  request.budget_bytes = given.bytes > 0 ? given.bytes : engine::resident_peak_bytes(spec, cost, request);
  const int64_t budget = request.budget_bytes, bucket_bytes = cfg.bucket_bytes();
  const offload::OffloadProblem problem(spec, cost, bucket_bytes, budget);  // without checkpointing

  console::print("ferry plan: {} ({} layers, n_embd {}), {:.1f}M parameters, batch {}x{}, policy {}, budget {}{}\n",
                 spec.kind, cfg.model.n_layer, cfg.model.n_embd, spec.param_count() / 1e6, cfg.train.batch_size,
                 cfg.sequence(), offload::to_string(chosen), memory::format_bytes(budget),
                 given.note.empty() ? "" : " (" + given.note + ")");
  console::print("device: {}\n", target.says);
  console::print("cost model: {}{}{}\n", cost.name, cost.assumed ? " (assumed figures, not measured)" : "",
                 cache.empty() ? "" : ", cached in " + cache);
  console::print("parameters: {} bucket(s) of up to {}, {} of working copies{}\n", problem.n_buckets,
                 memory::format_bytes(bucket_bytes), memory::format_bytes(problem.total_weight_bytes()),
                 problem.trained_params() <
                         problem.total_params()  // optim.groups froze some: planned without gradients or updates
                     ? fmt::format("; {:.2f}M frozen (no gradients, copies back or AdamW)",
                                   (problem.total_params() - problem.trained_params()) / 1e6)
                     : "");
  console::print(
      "activations: {} alive at the busiest op without checkpointing\n",
      memory::format_bytes(*std::max_element(problem.activation_live.begin(), problem.activation_live.end())));

  const double bound = offload::lower_bound_step_s(spec, cost, request);  // over the checkpointing it allows
  nlohmann::json all = nlohmann::json::array();
  nlohmann::json main;
  std::string line = "policies:", device_error;
  std::optional<engine::HostMemoryEstimate> host;
  int64_t peak = 0;
  for (offload::Policy policy : offload::all_policies()) {
    nlohmann::json j{{"policy", offload::to_string(policy)}, {"budget_bytes", budget}, {"lower_bound_step_s", bound}};
    if (policy != chosen && !offload::overlap_allowed(policy, request.overlap)) {  // the chosen one: plan_step says why
      line += fmt::format(" {} has no overlap {} |", offload::to_string(policy), offload::to_string(request.overlap));
      j.update({{"fits", false},
                {"error", fmt::format("offload.overlap: {} needs AdamW on the CPU; this policy runs it on the device", offload::to_string(request.overlap))}});
      all.push_back(j);
      continue;
    }
    try {
      request.policy = policy;
      const offload::StepPlan plan = offload::plan_step(spec, cost, request);
      const offload::SimResult r = offload::simulate(plan.problem, plan.schedule, plan.memory);  // one micro-batch
      j.update({{"fits", true}, {"construction", plan.schedule.construction}, {"checkpointed_blocks", plan.problem.checkpointed_layers},
                {"peak_device_bytes", r.peak_device_bytes}, {"predicted_step_s", r.step_s},
                {"h2d_bytes", r.h2d_bytes}, {"d2h_bytes", r.d2h_bytes}, {"resident_bytes", r.resident_bytes},
                {"offloaded_bytes", r.offloaded_bytes}, {"stall_s", r.stall_s}});
      line += fmt::format(" {} {:.4f} s |", offload::to_string(policy), r.step_s);
      if (policy == chosen) host = print_chosen(cfg, spec, plan, r, bound, request, target, j), peak = r.peak_device_bytes;
    } catch (const offload::BudgetError& e) {
      j.update({{"fits", false}, {"error", e.what()}, {"peak_device_bytes", nullptr}, {"predicted_step_s", nullptr},
                {"h2d_bytes", nullptr}, {"d2h_bytes", nullptr}, {"resident_bytes", nullptr},
                {"offloaded_bytes", nullptr}, {"minimum_device_bytes", offload::minimum_device_bytes(problem)}});
      line += fmt::format(" {} does not fit |", offload::to_string(policy));
      if (policy == chosen) device_error = e.what();
    }
    if (policy == chosen) main = j;
    all.push_back(j);
  }
  line.resize(line.size() - 2);  // the last " |"
  console::print("{}\n", line);
  const int status = print_verdict(device_error, host ? &*host : nullptr, peak, budget, main);
  if (!opt.json.empty()) {
    main["policies"] = all;
    main["cost_model"] = cost.to_json();
    main["buckets"] = problem.n_buckets;
    main["model"] = cfg.model.kind;
    main["params"] = spec.param_count();
    main["bucket_bytes"] = bucket_bytes;
    write_file_atomically(opt.json, main.dump(2) + "\n", "--json");
  }
  return status;
}

Command add_plan(CLI::App& app) {
  struct PlanArgs {
    std::string config, policy, budget, json, max_model;
    std::vector<std::string> overrides;
  };
  auto args = std::make_shared<PlanArgs>();
  auto* plan = app.add_subcommand("plan", "Plan the offload of an experiment without training: fit, placement, "
                                          "predicted step time, all policies side by side");
  plan->add_option("-c,--config", args->config, "Experiment file (YAML)")->required()->check(CLI::ExistingFile);
  plan->add_option("--budget", args->budget, "Device memory budget, e.g. 8GiB or 512MiB (default: offload.gpu_budget, else as "
                                             "ferry train takes it: a GPU's free memory less max(1 GiB, 5%), or on the host "
                                             "device what resident needs)");
  plan->add_option("--policy", args->policy, "resident | zero-offload | chunk-lru | greedy (default: offload.policy)");
  plan->add_option(
      "--json", args->json,
      "Also write the plan as JSON (policy, fits, budget_bytes, peak_device_bytes, "
      "predicted_step_s, lower_bound_step_s, h2d_bytes, d2h_bytes, resident_bytes, "
      "offloaded_bytes, and every policy under policies; with --max-model: the largest model, its limit and "
      "the next size up, under max_model)");
  plan->add_option("--set", args->overrides, "Override any config key, e.g. --set offload.bucket_mb=64 (repeatable)");
  auto* max_model = plan->add_option("--max-model", args->max_model, max_model_help())
                        ->expected(0, 1)
                        ->default_str("")  // the value of --max-model given alone: the config's width
                        ->option_text("[SHAPE]");
  plan->footer(
      "Exit status: 0 when the plan fits (the device budget and the host memory), 3 when it does not; the\n"
      "last line says which: 'fits: yes: ...' or 'fits: no: device memory: ...' / 'fits: no: host memory: ...'.\n"
      "74 instead of 0 when stdout could not take the plan (a full disk, a closed stdout).\n"
      "The device is the one ferry train takes here (device: auto: a visible GPU, measured at start-up in\n"
      "seconds; else the host device, its rates measured once and cached, a small model's ops profiled as\n"
      "ferry train profiles them, a second or more). offload.cost_model: a JSON cost\n"
      "model (configs/cost_models/h100-assumed.json plans for an H100 on any machine without a GPU).");
  return {plan,
          [args, max_model] {
            PlanOptions opt;
            opt.policy = args->policy;
            opt.json = args->json;
            try {
              if (!args->budget.empty()) opt.budget = engine::parse_bytes(args->budget);
            } catch (const std::invalid_argument& e) {
              throw std::runtime_error(std::string("--budget: ") + e.what());
            }
            // A named shape's keys go first, so that the user's own --set lines win.
            std::vector<std::string> overrides;
            if (*max_model) {
              opt.max_model = args->max_model;
              if (!args->max_model.empty())
                overrides = max_model_shape_overrides(args->max_model,
                                                      engine::load_config(args->config, args->overrides).model.kind);
            }
            overrides.insert(overrides.end(), args->overrides.begin(), args->overrides.end());
            const engine::Config cfg = engine::load_config(args->config, overrides);
            for (const std::string& warning : engine::config_warnings(cfg))
              console::print(stderr, "ferry: warning: {}\n", warning);
            std::vector<PathUse> paths = engine::run_inputs(cfg);  // the plan's run's, never written over either
            paths.push_back({"--config", args->config});
            paths.push_back({"--json", args->json, PathUse::Kind::Output});
            refuse_outputs_over_inputs(paths);
            if (!opt.max_model) return print_plan(cfg, opt);
            opt.train_command = "ferry train --config " + args->config;
            for (const std::string& set : overrides) opt.train_command += " --set " + set;
            if (!args->budget.empty()) opt.train_command += " --set offload.gpu_budget=" + args->budget;
            if (!args->policy.empty()) opt.train_command += " --set offload.policy=" + args->policy;
            return print_max_model(cfg, opt);
          },
          true};
}

}  // namespace ferry::cli
