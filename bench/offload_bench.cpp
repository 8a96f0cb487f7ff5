// ferry-bench offload: real offloaded training on the config's device (the host device, or with
// --set device=cuda a GPU), every policy (and both overlap modes where AdamW runs on the CPU) at one budget
// and link bandwidth: the measured step time beside the Simulator's prediction, what crossed the link, the
// compute stream's stalls, and on an H100/H200 the MFU (bench/mfu.h).
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/bench_common.h"
#include "bench/mfu.h"
#include "engine/config.h"
#include "models/registry.h"
#include "engine/trainer.h"
#include "memory/host_buffer.h"

namespace ferry::bench {

int run_offload_bench(const std::string& config_path, const std::vector<std::string>& overrides, int steps,
                      const std::string& json_path, const std::string& markdown_path, const std::string& command) {
  nlohmann::json runs = nlohmann::json::array();
  std::ostringstream table;
  table << "| policy | overlap | ckpt blocks | device arena | h2d / step | d2h / step | stall / step | predicted s | measured s (median) | measured / predicted | MFU |\n"
        << "|---|---|---|---|---|---|---|---|---|---|---|\n";
  std::string shape, device, peak_note = "MFU: not computed (no peak known for this device)";
  for (const char* policy : {"resident", "zero-offload", "chunk-lru", "greedy"}) {
    for (const char* overlap : {"backward", "delayed"}) {
      if (std::string(policy) == "resident" && std::string(overlap) == "delayed") continue;  // AdamW on the device
      std::vector<std::string> o = overrides;
      o.push_back(fmt::format("offload.policy={}", policy));
      o.push_back(fmt::format("offload.overlap={}", overlap));
      o.push_back(fmt::format("train.steps={}", steps));
      o.push_back("offload.sync_steps=1");
      o.push_back("train.eval_batches=1");
      engine::Config cfg = engine::load_config(config_path, o);
      cfg.train.checkpoint_dir.clear(), cfg.train.checkpoint_every = 0;  // timings, not checkpoints (and one run per dir)
      shape = fmt::format("GPT-2 {} layers, n_embd {}, batch {}x{}", cfg.model.n_layer, cfg.model.n_embd, cfg.train.batch_size, cfg.sequence());
      const bool cuda = cfg.device == "cuda";
      const std::string gpu = cuda ? cuda_gpu_name(0) : "";
      device = cuda                             ? fmt::format("CUDA device 0 ({})", gpu)
               : cfg.host_device.link_gbps > 0 ? fmt::format("host device, link {:g} GB/s each way", cfg.host_device.link_gbps)
                                               : "host device, unthrottled copies";
      const std::optional<PeakRate> peak = cuda ? peak_rate(gpu, cfg.precision()) : std::nullopt;
      if (peak) peak_note = fmt::format("MFU: of {} ({:.0f} TFLOP/s); {}", peak->name, peak->flops / 1e12, kMfuFormula);
      engine::TrainOptions opt;
      opt.progress = nullptr;
      nlohmann::json run{{"policy", policy}, {"overlap", overlap}};
      try {
        const engine::TrainSummary s = engine::train(cfg, opt);
        const double ratio = s.median_step_s / s.predicted_step_s;
        const int64_t tokens = int64_t(cfg.train.batch_size) * cfg.sequence() * cfg.train.grad_accum;
        const StepFlops flops = step_flops(flop_shape(models::build_model(cfg.model, cfg.train.batch_size, cfg.sequence()), cfg.model.n_layer,
                                                      cfg.model.n_embd, cfg.sequence(), tokens, s.checkpointed_blocks));
        const std::string mfu_cell = peak ? fmt::format("{:.1f}%", 100 * mfu(flops, s.median_step_s, *peak)) : "-";
        run.update({{"fits", true}, {"checkpointed_blocks", s.checkpointed_blocks}, {"arena_bytes", s.arena_bytes},
                    {"measured_peak_device_bytes", s.measured_peak_device_bytes},
                    {"budget_bytes", s.budget_bytes}, {"h2d_bytes_per_step", s.h2d_bytes}, {"d2h_bytes_per_step", s.d2h_bytes},
                    {"stall_s_per_step", s.stall_s / s.steps}, {"predicted_step_s", s.predicted_step_s},
                    {"step_s", s.median_step_s}, {"measured_over_predicted", ratio}, {"tokens_per_s", s.tokens_per_s},
                    {"final_loss", s.train_loss}, {"model_flops_per_step", flops.model}, {"recompute_flops_per_step", flops.recompute},
                    {"mfu", peak ? nlohmann::json(mfu(flops, s.median_step_s, *peak)) : nlohmann::json(nullptr)}});
        const std::string row = fmt::format("| {} | {} | {} | {} | {} | {} | {:.1f} ms | {:.4f} | {:.4f} | {:.2f} | {} |", policy, overlap,
                                            s.checkpointed_blocks, memory::format_bytes(s.arena_bytes),
                                            memory::format_bytes(s.h2d_bytes), memory::format_bytes(s.d2h_bytes),
                                            1e3 * s.stall_s / s.steps, s.predicted_step_s, s.median_step_s, ratio, mfu_cell);
        table << row << "\n";
        fmt::print(stderr, "{}\n", row);
      } catch (const std::exception& e) {
        run.update({{"fits", false}, {"error", e.what()}});
        table << fmt::format("| {} | {} | {} |\n", policy, overlap, e.what());
        fmt::print(stderr, "{} {}: {}\n", policy, overlap, e.what());
      }
      runs.push_back(run);
    }
  }
  fmt::print("{}{}\n", table.str(), peak_note);
  if (!json_path.empty()) {
    nlohmann::json j{{"benchmark", "offload"}, {"machine", cpu_model()}, {"threads", std::thread::hardware_concurrency()},
                     {"device", device}, {"model", shape}, {"steps", steps}, {"runs", runs}, {"mfu_note", peak_note}, {"date", today()}, {"command", command}};
    write_result(json_path, "--json", j.dump(2) + "\n");
  }
  if (!markdown_path.empty())
    write_result(markdown_path, "--markdown",
                 fmt::format("# Offloaded training: measured vs predicted\n\n{}; {}; {} steps per run "
                             "(median step reported). Machine: {}, {} hardware threads. Date: {}.\n\nCommand: `{}`\n\n",
                             shape, device, steps, cpu_model(), std::thread::hardware_concurrency(), today(), command) +
                     table.str() + "\n" + peak_note + ".\n");
  return 0;
}

}  // namespace ferry::bench
