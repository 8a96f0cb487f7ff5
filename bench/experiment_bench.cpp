// ferry-bench experiment: trains an experiment file as shipped (the README's default run, say) and records
// what a user sees: wall time, tokens/s, the validation loss before and after, peak memory; with the
// machine, the date and the command, so that every figure the README quotes has a file behind it.
#include <fmt/format.h>
#include <sys/resource.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "bench/bench_common.h"
#include "engine/config.h"
#include "engine/progress.h"
#include "engine/trainer.h"
#include "memory/host_buffer.h"
#include "foundation/console.h"

namespace ferry::bench {

int run_experiment_bench(const std::string& config_path, const std::vector<std::string>& overrides, const std::string& json_path,
                         const std::string& markdown_path, const std::string& command) {
  const auto checkpoints = std::filesystem::temp_directory_path() / fmt::format("ferry-bench-experiment-{}", ::getpid());
  std::vector<std::string> o = overrides;
  o.push_back("train.checkpoint_dir=" + checkpoints.string());  // the run's checkpoints are not results
  const engine::Config cfg = engine::load_config(config_path, o);
  engine::TrainOptions opt;
  const engine::TrainSummary s = engine::train(cfg, opt);
  std::filesystem::remove_all(checkpoints);
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const int64_t rss = int64_t(usage.ru_maxrss) * 1024;
  const std::string row = fmt::format("| {} | {} | {} | {} | {:.0f} | {:.4f} | {:.4f} | {:+.1f}% | {} | {} |", config_path, cfg.model.kind,
                                      s.steps, engine::format_duration(s.wall_s), s.tokens_per_s, s.val_loss_start, s.val_loss,
                                      100.0 * (s.val_loss - s.val_loss_start) / s.val_loss_start, memory::format_bytes(s.arena_bytes),
                                      memory::format_bytes(rss));
  const std::string header =
      "| config | model | steps | wall time | tokens/s | val loss at start | val loss at end | change | device arena | peak RSS |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n";
  console::print("{}{}\n", header, row);
  if (!json_path.empty()) {
    const nlohmann::json j{{"benchmark", "experiment"}, {"config", config_path}, {"model", cfg.model.kind}, {"steps", s.steps},
                           {"wall_s", s.wall_s}, {"tokens_per_s", s.tokens_per_s}, {"val_loss_start", s.val_loss_start},
                           {"val_loss", s.val_loss}, {"train_loss", s.train_loss}, {"arena_bytes", s.arena_bytes}, {"peak_rss_bytes", rss},
                           {"machine", cpu_model()}, {"hardware_threads", std::thread::hardware_concurrency()}, {"date", today()},
                           {"command", command}};
    write_result(json_path, "--json", j.dump(2) + "\n");
  }
  if (!markdown_path.empty())
    write_result(markdown_path, "--markdown",
                 fmt::format("# Experiment: {}\n\nTrained as shipped, on the host device. Machine: {}, {} hardware threads. Date: {}.\n\n"
                             "Command: `{}`\n\n{}{}\n",
                             config_path, cpu_model(), std::thread::hardware_concurrency(), today(), command, header, row));
  return 0;
}

}  // namespace ferry::bench
