// ferry-bench memory: what a training run holds in host memory, per parameter. Each shape and precision (bf16 and
// fp32 with the exact optimizer state, bf16 with the compact one) trains a few steps in a child process of its own (so
// that runs do not share a peak); the parent reads the child's peak RSS and subtracts the device memory (on the host
// device, host memory standing for the GPU's: its arena and its ops' workspaces) to give host bytes per parameter,
// beside the host buckets (master, m, v, working copy, gradient landing; the compact state's bf16 weights, m, v and
// gradients) that the offload engine needs by design.
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/bench_common.h"
#include "engine/config.h"
#include "engine/trainer.h"
#include "memory/host_buffer.h"
#include "foundation/console.h"

namespace ferry::bench {
namespace {

struct Shape {
  const char* name;
  std::vector<std::string> sets;
};

// GPT-2 small and medium, at a small batch and sequence: the model state, not the activations, is measured.
const std::vector<Shape> kShapes{{"GPT-2 124M", {}}, {"GPT-2 350M", {"model.n_layer=24", "model.n_embd=1024", "model.n_head=16"}}};

// What a run stores: its precision and optimizer state, as the table names it, and the keys that set them.
struct Variant {
  const char* name;
  std::vector<std::string> sets;
};
const std::vector<Variant> kVariants{{"bf16", {"train.precision=bf16"}},
                                     {"fp32", {"train.precision=fp32"}},
                                     {"bf16, compact state", {"train.precision=bf16", "optim.state=compact"}}};

// Trains in a child process; returns its summary (as JSON) and its peak RSS in bytes.
std::pair<nlohmann::json, int64_t> run_child(const engine::Config& cfg) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("ferry-bench memory: pipe failed");
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("ferry-bench memory: fork failed");
  if (pid == 0) {
    close(fds[0]);
    std::string out;
    try {
      engine::TrainOptions opt;
      opt.progress = nullptr;
      const engine::TrainSummary s = engine::train(cfg, opt);
      out = nlohmann::json{{"params", s.params}, {"arena_bytes", s.arena_bytes}, {"device_bytes", s.device_bytes_held},
                           {"host_bucket_bytes", s.host_bucket_bytes}, {"policy", s.policy}, {"median_step_s", s.median_step_s}}.dump();
    } catch (const std::exception& e) {
      out = nlohmann::json{{"error", e.what()}}.dump();
    }
    for (size_t done = 0; done < out.size();) {
      const ssize_t n = write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  if (text.empty()) throw std::runtime_error(fmt::format("ferry-bench memory: the training process ended with status {}", status));
  return {nlohmann::json::parse(text), int64_t(usage.ru_maxrss) * 1024};
}

}  // namespace

int run_memory_bench(const std::string& config_path, const std::vector<std::string>& overrides, int steps, const std::string& json_path,
                     const std::string& markdown_path, const std::string& command) {
  nlohmann::json runs = nlohmann::json::array();
  std::ostringstream table;
  table << "| shape | precision | params | policy | peak RSS | device arena | device memory | host bytes / param | of which host buckets | other |\n"
        << "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Shape& shape : kShapes) {
    for (const auto& [precision, sets] : kVariants) {
      std::vector<std::string> o = shape.sets;
      o.insert(o.end(), sets.begin(), sets.end());
      o.insert(o.end(), overrides.begin(), overrides.end());
      o.push_back(fmt::format("train.steps={}", steps));
      o.push_back("train.eval_batches=1");
      engine::Config cfg = engine::load_config(config_path, o);
      cfg.train.checkpoint_dir.clear(), cfg.train.checkpoint_every = 0;  // the run's state, not a checkpoint's
      console::print(stderr, "{} ({}): training {} steps in a child process\n", shape.name, precision, steps);
      const auto [s, rss] = run_child(cfg);
      nlohmann::json run{{"shape", shape.name}, {"precision", precision}, {"sets", o}, {"peak_rss_bytes", rss}};
      if (s.contains("error")) {
        run["error"] = s["error"];
        table << fmt::format("| {} | {} | | | {} | | | | | |\n", shape.name, precision, s["error"].get<std::string>());
      } else {
        const double params = s["params"].get<double>();
        const int64_t device = s["device_bytes"].get<int64_t>();
        const double host = double(rss - device) / params, buckets = s["host_bucket_bytes"].get<double>() / params;
        run.update(s);
        run.update({{"host_bytes_per_param", host}, {"host_bucket_bytes_per_param", buckets}});
        table << fmt::format("| {} | {} | {:.1f}M | {} | {} | {} | {} | {:.2f} | {:.2f} | {:.2f} |\n", shape.name, precision, params / 1e6,
                             s["policy"].get<std::string>(), memory::format_bytes(rss), memory::format_bytes(s["arena_bytes"].get<int64_t>()),
                             memory::format_bytes(device), host, buckets, host - buckets);
      }
      runs.push_back(run);
    }
  }
  console::print("{}", table.str());
  const std::string about = fmt::format("Machine: {}, {} hardware threads. Date: {}.", cpu_model(), std::thread::hardware_concurrency(), today());
  if (!json_path.empty())
    write_result(json_path, "--json",
                 nlohmann::json{{"benchmark", "memory"}, {"runs", runs}, {"machine", cpu_model()}, {"date", today()}, {"command", command}}.dump(2) + "\n");
  if (!markdown_path.empty())
    write_result(markdown_path, "--markdown",
                 fmt::format("# Host memory per parameter\n\nPeak RSS of a training run (its own process), minus the device memory "
                             "(on the host device, host memory standing for the GPU's: the arena and the ops' workspaces, as "
                             "memory::DeviceAllocations counts them), over the parameters. {}\n\nCommand: `{}`\n\n{}",
                             about, command, table.str()));
  return 0;
}

}  // namespace ferry::bench
