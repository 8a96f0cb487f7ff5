// `ferry train`: runs an experiment from a YAML file; Ctrl-C or SIGTERM ends it after the step with a
// checkpoint (a second one at once), and exit status 130.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/option_checks.h"
#include "engine/config.h"
#include "engine/config_schema.h"
#include "engine/device/stop.h"
#include "engine/progress.h"
#include "engine/trainer.h"

namespace ferry::cli {
namespace {

// After the options: every key of the config file, from the one table (engine/config_schema.h).
std::string train_footer() {
  return engine::config_keys_text() +
         "\nExample: ferry train --config configs/gpt-tiny.yaml --steps 50 --set offload.policy=greedy \\\n"
         "           --set offload.gpu_budget=48MiB --set device.host.link_gbps=8 --trace trace.json";
}

constexpr int kInterruptedStatus = 130;  // the shell's 128 + SIGINT

struct TrainArgs {
  std::string config_path, metrics_path, trace_path, resume, cost_model_path;
  bool resume_given = false;  // --resume "" is a mistake, not a fresh start
  bool overwrite_checkpoints = false;
  std::vector<std::string> overrides;
  int steps = 0;
  std::string seed;  // as written (checked as a uint64): train.seed takes all 2^64 values, so none can mean unset
  int trace_steps = 2;
};

// SIGINT / SIGTERM. Training: the first asks the trainer to finish the step and checkpoint (a copy that
// cannot finish within half a second is abandoned, and the step with it); a second ends the process at
// once, writing nothing. Start-up has nothing to save: it ends at once. Only async-signal-safe calls here.
void on_stop_signal(int) {
  auto say = [](const char* text, size_t n) { [[maybe_unused]] const ssize_t ignored = ::write(STDERR_FILENO, text, n); };
  if (device::stop_requested() || !device::stop_has_work_to_finish()) {
    static constexpr char kAtOnce[] = "\nferry: stopped at once; nothing more was written\n";
    say(kAtOnce, sizeof kAtOnce - 1);
    ::_exit(kInterruptedStatus);
  }
  device::request_stop();
  static constexpr char kAfterStep[] =
      "\nferry: stopping after this step, with a checkpoint (Ctrl-C again: stop at once, without one)\n";
  say(kAfterStep, sizeof kAfterStep - 1);
}

void handle_stop_signals() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a read or write under way goes on; the flag is polled
  for (int signal : {SIGINT, SIGTERM}) ::sigaction(signal, &action, nullptr);
}

// The summary's validation losses. NaN without a validation split, or as the final loss of a checkpoint of
// an earlier build (which did not record it): say why instead of printing them.
std::string validation_text(const engine::TrainSummary& s) {
  if (std::isnan(s.val_loss_start)) return "no validation (data.val_fraction: 0)";
  if (std::isnan(s.val_loss)) return "final val loss not recorded (a checkpoint of an earlier build)";
  return fmt::format("val loss {:.4f} (from {:.4f}, {:+.1f}%)", s.val_loss, s.val_loss_start,
                     100.0 * (s.val_loss - s.val_loss_start) / s.val_loss_start);
}

int run_train(TrainArgs args) {
  if (args.resume_given && args.resume.empty())
    throw std::runtime_error("--resume: an empty path; name a checkpoint folder or a train.checkpoint_dir (to start afresh, "
                             "leave --resume out)");
  handle_stop_signals();
  if (args.steps > 0) args.overrides.push_back("train.steps=" + std::to_string(args.steps));
  if (!args.seed.empty()) args.overrides.push_back("train.seed=" + args.seed);
  const engine::Config cfg = engine::load_config(args.config_path, args.overrides);
  for (const std::string& warning : engine::config_warnings(cfg)) fmt::print(stderr, "ferry: warning: {}\n", warning);
  engine::TrainOptions opt;
  opt.metrics = args.metrics_path;
  opt.save_cost_model = args.cost_model_path;
  opt.resume = args.resume;
  opt.overwrite_checkpoints = args.overwrite_checkpoints;
  opt.trace = args.trace_path;
  opt.trace_steps = args.trace_steps;
  opt.stop = &device::stop_flag();
  engine::TrainSummary s;
  try {
    s = engine::train(cfg, opt);
  } catch (const std::exception& e) {
    if (!device::stop_requested()) throw;
    fmt::print(stderr, "\nferry: interrupted: {}\n", e.what());
    return kInterruptedStatus;
  }
  if (s.already_complete) {  // --resume named the run's final checkpoint: what it recorded
    fmt::print("nothing to train: {} is the final checkpoint ({} steps) | {}\n", s.last_checkpoint.string(), s.steps,
               validation_text(s));
    return 0;
  }
  if (s.interrupted) {
    fmt::print("interrupted after step {}{}\n", s.steps,
               s.last_checkpoint.empty() ? std::string(" (no train.checkpoint_dir: nothing saved)")
                                         : "; resume with --resume " + s.last_checkpoint.string());
    return kInterruptedStatus;
  }
  fmt::print("done: {} steps in {} | train loss {:.4f} | {} | {:.0f} tokens/s\n", s.steps, engine::format_duration(s.wall_s),
             s.train_loss, validation_text(s), s.tokens_per_s);
  return 0;
}

}  // namespace

Command add_train(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  auto* train = app.add_subcommand("train", "Train a GPT-2 or BERT model from a YAML experiment file");
  train->add_option("-c,--config", args->config_path, "Experiment file (YAML)")->required()->check(CLI::ExistingFile);
  train->add_option("--steps", args->steps, "Override train.steps")->transform(integer_in(1, INT32_MAX));
  train->add_option("--seed", args->seed, "Override train.seed")->transform(integer_in(0, UINT64_MAX));
  train->add_option("--metrics", args->metrics_path, "Write one JSON line per step to this file "
                                                      "(step, loss, val_loss when evaluated, lr, grad_norm, tokens_per_s, elapsed_s, "
                                                      "step_s, predicted_step_s, stall_s, h2d_bytes, d2h_bytes, peak_device_bytes; "
                                                      "loss_scale with fp16)");
  train->add_option("--save-cost-model", args->cost_model_path,
                    "Write the cost model this run planned with (a file offload.cost_model reads: on a GPU its links and CPU "
                    "AdamW measured at start-up; the op times profiled on this model are not in it)");
  train->add_option("--trace", args->trace_path, "Write a Chrome/Perfetto trace (open in ui.perfetto.dev): a track per stream "
                                                 "and the CPU AdamW worker, a slice per op, copy and optimizer task");
  train->add_option("--trace-steps", args->trace_steps, "Steps the trace covers, from the first (default 2)")
      ->transform(integer_in(1, INT32_MAX));
  train->add_option("--set", args->overrides, "Override any config key, e.g. --set optim.lr=1e-3 (repeatable)");
  auto* resume = train->add_option("--resume", args->resume, "Continue from a checkpoint folder, or the newest in a "
                                                             "train.checkpoint_dir; the config must match the run that wrote it");
  train->add_flag("--overwrite-checkpoints", args->overwrite_checkpoints,
                  "Let a new run replace another run's checkpoints in train.checkpoint_dir (deleted when it writes its first; "
                  "folders no ferry-run.json lists are never deleted)");
  train->footer(train_footer());
  return {train, [args, resume] {
            args->resume_given = resume->count() > 0;
            return run_train(*args);
          }};
}

}  // namespace ferry::cli
