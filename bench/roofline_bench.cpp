// ferry-bench roofline: the least time each op kind of a model's step could take on an H100 or H200 (bytes and
// FLOPs at the card's peaks), computed here without a GPU: the order in which kernel work pays, before a GPU
// session measures the real breakdown (`ferry-bench step --device cuda`).
#include <fmt/format.h>

#include <thread>

#include "bench/bench_common.h"
#include "bench/op_breakdown.h"
#include "engine/config.h"
#include "foundation/console.h"

namespace ferry::bench {

int run_roofline_bench(const std::string& config_path, const std::vector<std::string>& overrides, const std::string& gpu, int B, int T,
                       const std::string& json_path, const std::string& markdown_path, const std::string& command) {
  std::vector<std::string> o{fmt::format("train.batch_size={}", B)};
  if (T > 0) o.push_back(fmt::format("train.seq_len={}", T));
  o.insert(o.end(), overrides.begin(), overrides.end());  // after the defaults: --set wins
  const engine::Config cfg = engine::load_config(config_path, o);
  const std::string card = gpu == "h200" ? "H200" : gpu == "h100-pcie" ? "H100 PCIe" : "H100 SXM";
  const PeakRate peak = *peak_rate(card, cfg.precision());
  const models::ModelSpec spec = models::build_model(cfg.model, cfg.train.batch_size, cfg.sequence(), cfg.precision());
  const std::vector<OpKindTime> rows = sum_by_kind(spec, {}, peak);
  double roofline_s = 0;
  for (const OpKindTime& r : rows) roofline_s += r.roofline_s;
  const int64_t tokens = int64_t(cfg.train.batch_size) * cfg.sequence();
  const StepFlops flops = step_flops(flop_shape(spec, cfg.model.n_layer, cfg.model.n_embd, cfg.sequence(), tokens, 0));
  // The best MFU these ops allow: every kernel at its roofline, no gaps (memory-bound ops keep it below 100%).
  const double mfu_ceiling = mfu(flops, roofline_s, peak);
  const std::string summary = fmt::format(
      "model {} ({}, {:.1f}M parameters, {}) batch {}x{} on {}: roofline step {:.2f} ms, {:.0f} tokens/s; MFU at most {:.1f}%",
      config_path, cfg.model.kind, spec.param_count() / 1e6, cfg.train.precision, cfg.train.batch_size, cfg.sequence(), peak.name,
      roofline_s * 1e3, double(tokens) / roofline_s, 100 * mfu_ceiling);
  const std::string table = roofline_markdown(rows, peak);
  console::print("{}\n\n{}", summary, table);
  nlohmann::json j{{"benchmark", "roofline"}, {"gpu", card}, {"config", config_path}, {"precision", cfg.train.precision},
                   {"batch", cfg.train.batch_size}, {"seq", cfg.sequence()}, {"params", spec.param_count()},
                   {"peak_tflops_per_s", peak.flops / 1e12}, {"peak_memory_gb_per_s", peak.bytes_per_s / 1e9},
                   {"roofline_step_s", roofline_s}, {"mfu_ceiling", mfu_ceiling}, {"by_op_kind", op_breakdown_json(rows)},
                   {"machine", {{"cpu", cpu_model()}, {"cores", std::thread::hardware_concurrency()}}}, {"date", today()},
                   {"command", command}};
  if (!json_path.empty()) write_result(json_path, "--json", j.dump(2) + "\n");
  if (!markdown_path.empty())
    write_result(markdown_path, "--markdown",
                 fmt::format("# Roofline of a training step on {}\n\nComputed on {} ({} cores), no GPU. Date: {}.\n\nCommand: `{}`\n\n{}.\n\n{}",
                             peak.name, cpu_model(), std::thread::hardware_concurrency(), today(), command, summary, table));
  return 0;
}

}  // namespace ferry::bench
