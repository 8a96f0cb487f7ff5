// ferry-bench offload: real offloaded training on the config's device (the host device, or with --set
// device=cuda a GPU), every policy (every overlap where AdamW runs on the CPU: backward, delayed, pipelined),
// each run `--repeats` times:
// the plan's tiers, the measured step beside the Simulator's prediction, the link's bytes, stalls, MFU.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "bench/bench_common.h"
#include "bench/mfu.h"
#include "engine/config.h"
#include "models/registry.h"
#include "engine/trainer.h"
#include "memory/host_buffer.h"
#include "foundation/console.h"

namespace ferry::bench {
namespace {

// What one run shares with the rest of the table: the model's shape, the device, the MFU note.
struct BenchContext {
  std::string shape, device, gpu, peak_note = "MFU: not computed (no peak known for this device)";
};

// The parameters and weight bytes of each of greedy's tiers, e.g. "0.26M / 0.20M / 0.38M" and in JSON.
std::string tiers_cell(const engine::TrainSummary& s) {
  return fmt::format("{:.2f}M / {:.2f}M / {:.2f}M", s.tier_params[0] / 1e6, s.tier_params[1] / 1e6, s.tier_params[2] / 1e6);
}
nlohmann::json tiers_json(const engine::TrainSummary& s) {
  nlohmann::json j;
  const char* names[3] = {"device", "weights resident", "streamed"};  // offload::Tier's order
  for (int t = 0; t < 3; ++t) j[names[t]] = {{"params", s.tier_params[t]}, {"weight_bytes", s.tier_bytes[t]}};
  return j;
}

// The config of one policy and overlap, and the table's context from it.
engine::Config run_config(const OffloadBenchOptions& o, const std::string& policy, const std::string& overlap, BenchContext& ctx) {
  std::vector<std::string> overrides = o.overrides;
  overrides.push_back(fmt::format("offload.policy={}", policy));
  overrides.push_back(fmt::format("offload.overlap={}", overlap));
  overrides.push_back(fmt::format("train.steps={}", o.steps));
  overrides.push_back("offload.sync_steps=1");
  overrides.push_back("train.eval_batches=1");
  engine::Config cfg = engine::load_config(o.config, overrides);
  cfg.train.checkpoint_dir.clear(), cfg.train.checkpoint_every = 0;  // timings, not checkpoints (and one run per dir)
  ctx.shape = fmt::format("GPT-2 {} layers, n_embd {}, batch {}x{}", cfg.model.n_layer, cfg.model.n_embd, cfg.train.batch_size, cfg.sequence());
  const bool cuda = cfg.device == "cuda";
  ctx.gpu = cuda ? cuda_gpu_name(0) : "";
  ctx.device = cuda                             ? fmt::format("CUDA device 0 ({})", ctx.gpu)
               : cfg.host_device.link_gbps > 0 ? fmt::format("host device, link {:g} GB/s each way", cfg.host_device.link_gbps)
                                               : "host device, unthrottled copies";
  return cfg;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// One policy and overlap trained `o.repeats` times on the config's device (each run profiles its ops and
// plans afresh): its JSON record and its table row, the medians over the runs beside the ratios' range.
std::pair<nlohmann::json, std::string> run_one(const OffloadBenchOptions& o, const std::string& policy, const std::string& overlap,
                                               BenchContext& ctx) {
  const engine::Config cfg = run_config(o, policy, overlap, ctx);
  const std::optional<PeakRate> peak = ctx.gpu.empty() ? std::nullopt : peak_rate(ctx.gpu, cfg.precision());
  if (peak) ctx.peak_note = fmt::format("MFU: of {} ({:.0f} TFLOP/s); {}", peak->name, peak->flops / 1e12, kMfuFormula);
  engine::TrainOptions opt;
  opt.progress = nullptr;
  nlohmann::json run{{"policy", policy}, {"overlap", overlap}};
  try {
    std::vector<engine::TrainSummary> runs;
    std::vector<double> predicted, measured, ratios;
    std::vector<std::string> tiers;  // each distinct plan's tiers, in the order first seen
    nlohmann::json repeats = nlohmann::json::array();
    for (int r = 0; r < o.repeats; ++r) {
      const engine::TrainSummary s = engine::train(cfg, opt);
      predicted.push_back(s.predicted_step_s), measured.push_back(s.median_step_s), ratios.push_back(s.median_step_s / s.predicted_step_s);
      if (std::find(tiers.begin(), tiers.end(), tiers_cell(s)) == tiers.end()) tiers.push_back(tiers_cell(s));
      repeats.push_back({{"plan", s.plan}, {"tiers", tiers_json(s)}, {"checkpointed_blocks", s.checkpointed_blocks},
                         {"predicted_step_s", s.predicted_step_s}, {"step_s", s.median_step_s}, {"measured_over_predicted", ratios.back()},
                         {"stall_s_per_step", s.stall_s / s.steps}, {"final_loss", s.train_loss}});
      runs.push_back(s);
    }
    const engine::TrainSummary& s = runs.front();  // the plan's bytes: alike in every run that chose the same plan
    const double pred = median(predicted), meas = median(measured), ratio = meas / pred;
    const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
    const int64_t tokens = int64_t(cfg.train.batch_size) * cfg.sequence() * cfg.train.grad_accum;
    const StepFlops flops = step_flops(flop_shape(models::build_model(cfg.model, cfg.train.batch_size, cfg.sequence()), cfg.model.n_layer,
                                                  cfg.model.n_embd, cfg.sequence(), tokens, s.checkpointed_blocks));
    const std::string mfu_cell = peak ? fmt::format("{:.1f}%", 100 * mfu(flops, meas, *peak)) : "-";
    std::string tiers_text = tiers[0];
    for (size_t i = 1; i < tiers.size(); ++i) tiers_text += " or " + tiers[i];
    run.update({{"fits", true},
                {"plan", s.plan},
                {"tiers", tiers_json(s)},
                {"checkpointed_blocks", s.checkpointed_blocks},
                {"arena_bytes", s.arena_bytes},
                {"measured_peak_device_bytes", s.measured_peak_device_bytes},
                {"budget_bytes", s.budget_bytes},
                {"h2d_bytes_per_step", s.h2d_bytes},
                {"d2h_bytes_per_step", s.d2h_bytes},
                {"stall_s_per_step", s.stall_s / s.steps},
                {"predicted_step_s", pred},
                {"step_s", meas},
                {"measured_over_predicted", ratio},
                {"ratio_min", *lo},
                {"ratio_max", *hi},
                {"repeats", repeats},
                {"tokens_per_step", tokens},
                {"tokens_per_s", double(tokens) / meas},
                {"trainer_tokens_per_s", s.tokens_per_s},
                {"final_loss", s.train_loss},
                {"model_flops_per_step", flops.model},
                {"recompute_flops_per_step", flops.recompute},
                {"mfu", peak ? nlohmann::json(mfu(flops, meas, *peak)) : nlohmann::json(nullptr)}});
    return {run, fmt::format("| {} | {} | {} | {} | {} | {} | {} | {:.1f} ms | {:.4f} | {:.4f} | {:.2f} ({:.2f}-{:.2f}) | {} |", policy,
                             overlap, tiers_text, s.checkpointed_blocks, memory::format_bytes(s.arena_bytes),
                             memory::format_bytes(s.h2d_bytes), memory::format_bytes(s.d2h_bytes), 1e3 * s.stall_s / s.steps, pred, meas,
                             ratio, *lo, *hi, mfu_cell)};
  } catch (const std::exception& e) {
    run.update({{"fits", false}, {"error", e.what()}});
    return {run, fmt::format("| {} | {} | {} |", policy, overlap, e.what())};
  }
}

}  // namespace

int run_offload_bench(const OffloadBenchOptions& o) {
  nlohmann::json runs = nlohmann::json::array();
  std::ostringstream table;
  table << "| policy | overlap | tiers: device / weights resident / streamed (parameters) | ckpt blocks | device arena | h2d / step | "
           "d2h / step | stall / step | predicted s | measured s (median) | measured / predicted (range over runs) | MFU |\n"
        << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  BenchContext ctx;
  const std::vector<std::string> policies =
      o.policies.empty() ? std::vector<std::string>{"resident", "zero-offload", "chunk-lru", "greedy"} : o.policies;
  const std::vector<std::string> overlaps =
      o.overlaps.empty() ? std::vector<std::string>{"backward", "delayed", "pipelined"} : o.overlaps;
  for (const std::string& policy : policies) {
    for (const std::string& overlap : overlaps) {
      if (policy == "resident" && overlap != "backward") continue;  // AdamW on the device
      auto [run, row] = run_one(o, policy, overlap, ctx);
      table << row << "\n";
      console::print(stderr, "{}\n", row);
      runs.push_back(std::move(run));
    }
  }
  console::print("{}{}\n", table.str(), ctx.peak_note);
  const std::string machine = fmt::format("Machine: {}, {} hardware threads. Date: {}.", cpu_model(), std::thread::hardware_concurrency(), today());
  if (!o.json.empty()) {
    nlohmann::json j{{"benchmark", "offload"}, {"machine", cpu_model()}, {"threads", std::thread::hardware_concurrency()},
                     {"device", ctx.device}, {"model", ctx.shape}, {"steps", o.steps}, {"repeats", o.repeats}, {"runs", runs}, {"mfu_note", ctx.peak_note},
                     {"date", today()}, {"command", o.command}};
    write_result(o.json, "--json", j.dump(2) + "\n");
  }
  if (!o.markdown.empty())
    write_result(o.markdown, "--markdown",
                 fmt::format("# Offloaded training: measured vs predicted\n\n{}; {}; {} steps per run (median step reported), {} run(s) per row (the medians of their predictions and "
                             "of their measurements; each run profiles its ops and plans afresh). {}\n\n"
                             "Command: `{}`\n\n",
                             ctx.shape, ctx.device, o.steps, o.repeats, machine, o.command) +
                     table.str() + "\n" + ctx.peak_note + ".\n");
  return 0;
}

}  // namespace ferry::bench
