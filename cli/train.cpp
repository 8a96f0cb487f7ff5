// `ferry train`: runs an experiment from a YAML file, each run in a run folder of its own (runs/<experiment>/<n>)
// unless train.checkpoint_dir names one, and ends saying where it saved and what to run next; Ctrl-C, SIGTERM
// or SIGHUP (a closed terminal) ends it after the step with a checkpoint (a second one at once), and exit
// status 130.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/option_checks.h"
#include "cli/sample.h"
#include "engine/config.h"
#include "engine/config_schema.h"
#include "engine/device/stop.h"
#include "engine/progress.h"
#include "engine/trainer.h"
#include "formats/checkpoint.h"
#include "formats/checkpoint_dir.h"
#include "foundation/console.h"

namespace ferry::cli {
namespace {

// After the options: every key of the config file, from the one table (engine/config_schema.h).
std::string train_footer() {
  return engine::config_keys_text() +
         "\nExample: ferry train --config configs/gpt-tiny.yaml --steps 50 --set offload.policy=greedy \\\n"
         "           --set offload.gpu_budget=48MiB --set device.host.link_gbps=8 --trace trace.json";
}

constexpr int kInterruptedStatus = 130;  // the shell's 128 + SIGINT
constexpr const char* kRunsFolder = "runs";  // run folders: runs/<config file's stem>/<n>, where ferry runs
constexpr const char* kNewestRun = "<newest run>";  // what --resume holds when given without a folder

struct TrainArgs {
  std::string program;  // argv[0], how the user invoked ferry: the commands printed at the end start with it
  std::string config_path, metrics_path, trace_path, resume, cost_model_path;
  bool resume_given = false;  // --resume "" is a mistake, not a fresh start
  bool overwrite_checkpoints = false;
  bool resume_with_changed_data = false;
  bool no_checkpoints = false;  // timing runs: no run folder, no checkpoint (a 1.5B model's is 18 GB)
  std::vector<std::string> overrides;
  int steps = 0;
  std::string seed;  // as written (checked as a uint64): train.seed takes all 2^64 values, so none can mean unset
  int trace_steps = 2;
};

// SIGINT / SIGTERM / SIGHUP. Training: the first asks the trainer to finish the step and checkpoint (a copy that
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
  // SIGHUP: the terminal closed (an ssh session dropped) ends a run as SIGTERM does, not without a checkpoint.
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(signal, &action, nullptr);
}

// The summary's validation losses. NaN without a validation split, or as the final loss of a checkpoint of
// an earlier build (which did not record it): say why instead of printing them.
std::string validation_text(const engine::TrainSummary& s) {
  if (std::isnan(s.val_loss_start)) return "no validation (data.val_fraction: 0)";
  if (std::isnan(s.val_loss)) return "final val loss not recorded (a checkpoint of an earlier build)";
  return fmt::format("val loss {:.4f} (from {:.4f}, {:+.1f}%)", s.val_loss, s.val_loss_start,
                     100.0 * (s.val_loss - s.val_loss_start) / s.val_loss_start);
}

// A word as a POSIX shell reads it back: as it is when no character in it means anything to a shell, else
// in single quotes (the commands printed at the end are copied and pasted).
std::string shell_word(const std::string& word) {
  static constexpr const char* kPlain = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+=./:,@%";
  if (!word.empty() && word.find_first_not_of(kPlain) == std::string::npos) return word;
  std::string quoted = "'";
  for (const char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// `ferry <command> <words...>` as the user invoked ferry, ready to paste.
std::string command_line(const TrainArgs& args, const std::string& command, const std::vector<std::string>& words) {
  std::string line = shell_word(args.program.empty() ? std::string("ferry") : args.program) + " " + command;
  for (const auto& w : words) line += " " + shell_word(w);
  return line;
}

// The options that made this run's config (--config, --steps, --seed, --set), which a resume must repeat.
std::vector<std::string> config_words(const TrainArgs& args, bool with_steps_and_seed) {
  std::vector<std::string> words{"--config", args.config_path};
  if (with_steps_and_seed && args.steps > 0) words.insert(words.end(), {"--steps", std::to_string(args.steps)});
  if (with_steps_and_seed && !args.seed.empty()) words.insert(words.end(), {"--seed", args.seed});
  for (const auto& o : args.overrides) words.insert(words.end(), {"--set", o});
  return words;
}

// What --resume names: a folder as given; without one, train.checkpoint_dir if set, else this experiment's
// run folders (the newest run's newest checkpoint).
std::string resume_folder(const TrainArgs& args, const engine::Config& cfg, const std::filesystem::path& experiment) {
  if (args.resume_given && args.resume.empty())
    throw std::runtime_error("--resume: an empty path; name a checkpoint folder, a run folder or a train.checkpoint_dir, or give "
                             "--resume alone for the newest run (to start afresh, leave --resume out)");
  if (args.resume != kNewestRun) return args.resume;
  if (!cfg.train.checkpoint_dir.empty()) return cfg.train.checkpoint_dir.string();
  if (formats::run_folders(experiment).empty())
    throw std::runtime_error(fmt::format("--resume: no run of {} to continue: '{}' holds no run folder; start one without --resume",
                                         args.config_path, experiment.string()));
  return experiment.string();
}

// Where the run saved, and the commands to run next, copy-paste ready.
void print_next_steps(const TrainArgs& args, const engine::TrainSummary& s) {
  if (s.last_checkpoint.empty()) return;
  console::print("saved: {}{}\n", s.last_checkpoint.string(),
                 s.metrics.empty() ? "" : " | metrics: " + s.metrics.string());
  const std::string folder = s.checkpoint_dir.string();  // its newest checkpoint is the one just saved
  if (s.interrupted) {
    std::vector<std::string> words = config_words(args, true);
    if (!args.metrics_path.empty()) words.insert(words.end(), {"--metrics", args.metrics_path});  // appended to
    words.insert(words.end(), {"--resume", folder});
    console::print("continue it:\n  {}\n", command_line(args, "train", words));
    return;
  }
  console::print("next:\n");
  if (why_not_sampleable(formats::read_checkpoint_state(s.last_checkpoint).first).empty())
    console::print("  {}\n", command_line(args, "sample", {"--checkpoint", folder, "--prompt", "The "}));
  std::vector<std::string> eval = config_words(args, false);
  eval.insert(eval.end(), {"--checkpoint", folder});
  console::print("  {}\n", command_line(args, "eval", eval));
  console::print("  {}\n",
                 command_line(args, "export", {"--checkpoint", folder, "--out", (s.checkpoint_dir / "hf").string()}));
}

int run_train(TrainArgs args) {
  handle_stop_signals();
  std::vector<std::string> overrides = args.overrides;
  if (args.steps > 0) overrides.push_back("train.steps=" + std::to_string(args.steps));
  if (!args.seed.empty()) overrides.push_back("train.seed=" + args.seed);
  engine::Config cfg = engine::load_config(args.config_path, overrides);
  for (const std::string& warning : engine::config_warnings(cfg))
    console::print(stderr, "ferry: warning: {}\n", warning);
  engine::TrainOptions opt;
  const std::filesystem::path experiment = std::filesystem::path(kRunsFolder) / std::filesystem::path(args.config_path).stem();
  if (args.no_checkpoints) cfg.train.checkpoint_dir.clear(), cfg.train.checkpoint_every = 0;
  else opt.experiment = experiment;
  opt.metrics = args.metrics_path;
  opt.save_cost_model = args.cost_model_path;
  if (args.resume_given) opt.resume = resume_folder(args, cfg, experiment);
  opt.overwrite_checkpoints = args.overwrite_checkpoints;
  opt.resume_with_changed_data = args.resume_with_changed_data;
  opt.config_file = args.config_path;
  opt.trace = args.trace_path;
  opt.trace_steps = args.trace_steps;
  opt.stop = &device::stop_flag();
  engine::TrainSummary s;
  try {
    s = engine::train(cfg, opt);
  } catch (const std::exception& e) {
    if (!device::stop_requested()) throw;
    console::print(stderr, "\nferry: interrupted: {}\n", e.what());
    return kInterruptedStatus;
  }
  if (s.already_complete) {  // --resume named the run's final checkpoint: what it recorded
    console::print("nothing to train: {} is the final checkpoint ({} steps), left as it is | {}\n",
                   s.last_checkpoint.string(), s.steps, validation_text(s));
    return 0;
  }
  if (s.interrupted) {
    console::print("interrupted after step {}{}\n", s.steps,
                   s.last_checkpoint.empty() ? " (--no-checkpoints: nothing saved)" : "");
    print_next_steps(args, s);
    return kInterruptedStatus;
  }
  console::print("done: {} steps in {} | train loss {:.4f} | {} | {:.0f} tokens/s\n", s.steps,
                 engine::format_duration(s.wall_s), s.train_loss, validation_text(s), s.tokens_per_s);
  print_next_steps(args, s);
  return 0;
}

}  // namespace

Command add_train(CLI::App& app, const std::string& program) {
  auto args = std::make_shared<TrainArgs>();
  args->program = program;
  auto* train = app.add_subcommand("train", "Train a GPT-2, Llama-family or BERT model from a YAML experiment file");
  train->add_option("-c,--config", args->config_path, "Experiment file (YAML)")->required()->check(CLI::ExistingFile);
  train->add_option("--steps", args->steps, "Override train.steps")->transform(integer_in(1, INT32_MAX));
  train->add_option("--seed", args->seed, "Override train.seed")->transform(integer_in(0, UINT64_MAX));
  train->add_option("--metrics", args->metrics_path, "Write one JSON line per step to this file "
                                                      "(step, loss, val_loss when evaluated, lr, grad_norm, tokens_per_s, elapsed_s, "
                                                      "step_s, predicted_step_s, stall_s, h2d_bytes, d2h_bytes, peak_device_bytes; "
                                                      "loss_scale with fp16); default: metrics.jsonl in the run folder");
  train->add_option("--save-cost-model", args->cost_model_path,
                    "Write the cost model this run planned with (a file offload.cost_model reads: on a GPU its links and CPU "
                    "AdamW measured at start-up; the op times profiled on this model are not in it)");
  train->add_option("--trace", args->trace_path, "Write a Chrome/Perfetto trace (open in ui.perfetto.dev): a track per stream "
                                                 "and the CPU AdamW worker, a slice per op, copy and optimizer task");
  train->add_option("--trace-steps", args->trace_steps, "Steps the trace covers, from the first (default 2)")
      ->transform(integer_in(1, INT32_MAX));
  train->add_option("--set", args->overrides, "Override any config key, e.g. --set optim.lr=1e-3 (repeatable)");
  auto* resume = train->add_option("--resume", args->resume,
                                   "Continue a run where it stopped, in its own folder: alone, this experiment's newest run "
                                   "(runs/<config's name>/<highest n>; with train.checkpoint_dir, that dir's newest); or a "
                                   "checkpoint folder, a run folder or an experiment folder (runs/gpt-tiny). The config must "
                                   "match the run that wrote it")
                     ->expected(0, 1)
                     ->default_str(kNewestRun)  // the value of --resume given alone
                     ->option_text("[FOLDER]");
  train->add_flag("--overwrite-checkpoints", args->overwrite_checkpoints,
                  "Let a new run replace another run's checkpoints in train.checkpoint_dir (deleted when it writes its first; "
                  "folders no ferry-run.json lists are never deleted)");
  train
      ->add_flag(
          "--resume-with-changed-data", args->resume_with_changed_data,
          "With --resume: go on although data.path (or its cached tokens, or the tokenizer's files) differs in size or "
          "checksum from the data the checkpoint recorded, which is otherwise an error")
      ->needs(resume);
  train->add_flag("--no-checkpoints", args->no_checkpoints,
                  "Write no checkpoint and no run folder, whatever the config says (timing runs; a stopped run then saves nothing)");
  train->footer(train_footer());
  return {train, [args, resume] {
            args->resume_given = resume->count() > 0;
            return run_train(*args);
          }};
}

}  // namespace ferry::cli
