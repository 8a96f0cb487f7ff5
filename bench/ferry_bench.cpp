// ferry-bench: Ferry's benchmarks (not tests). Each subcommand measures, prints, and with --json /
// --markdown writes its results (bench/results/ holds the committed ones).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/bench_common.h"
#include "foundation/console.h"
#include "foundation/openmp_wait.h"

namespace {

// `ferry-bench policies` and its options.
CLI::App* add_policies_command(CLI::App& app, ferry::bench::PoliciesBenchOptions& o, std::string& overlap, bool& single_tier) {
  o.cost_model = "configs/cost_models/h100-assumed.json";
  o.tokens = {4096, 16384, 65536};
  o.budgets_gib = {8, 16, 24, 40, 80};
  auto* policies = app.add_subcommand(
      "policies",
      "Every placement policy on a cost model: GPT-2 350M to 7B, Llama 3.2 1B, 3B and 3.1 8B, BERT-large, 4K to 64K "
      "tokens per step, 8 to 80 GiB");
  policies->add_option("--cost-model", o.cost_model, "Cost model file (default: the shipped H100-class one)")->check(CLI::ExistingFile);
  policies
      ->add_option(
          "--models", o.models,
          "Shapes to plan (default all): gpt2-350m gpt2-774m gpt2-1.5b gpt-3b gpt-7b llama-3.2-1b llama-3.2-3b "
          "llama-3.1-8b bert-large")
      ->check(CLI::IsMember({"gpt2-350m", "gpt2-774m", "gpt2-1.5b", "gpt-3b", "gpt-7b", "llama-3.2-1b", "llama-3.2-3b",
                             "llama-3.1-8b", "bert-large"}));
  policies->add_option("--tokens", o.tokens, "Tokens per step (default 4096 16384 65536): sequences of 1024 tokens "
                                             "(BERT 512), micro-batches of up to 16 (BERT 32), accumulated beyond")->check(CLI::PositiveNumber);
  policies->add_option("--budgets", o.budgets_gib, "Device memory budgets in GiB (default 8 16 24 40 80)")->check(CLI::PositiveNumber);
  policies->add_option("--overlap", overlap,
                       "backward | delayed (AdamW one step behind) | pipelined (greedy's CPU AdamW runs on into the next forward; "
                       "the other policies as their systems run them, backward)")
      ->check(CLI::IsMember({"backward", "delayed", "pipelined"}));
  policies->add_flag("--no-device-tier", single_tier, "Greedy runs AdamW on one side for every bucket (as before the device tier)");
  return policies;
}

// `ferry-bench offload` and its options (--set is shared with the subcommands that take overrides).
CLI::App* add_offload_command(CLI::App& app, ferry::bench::OffloadBenchOptions& o, std::vector<std::string>& overrides) {
  auto* offload = app.add_subcommand("offload", "Offloaded training on the host device, every policy and overlap mode: "
                                                "measured step time vs the Simulator's prediction");
  offload->add_option("-c,--config", o.config, "Experiment file")->required()->check(CLI::ExistingFile);
  offload->add_option("--set", overrides, "Config overrides, e.g. offload.gpu_budget=48MiB device.host.link_gbps=1 (repeatable)");
  offload->add_option("--steps", o.steps, "Training steps per run (the median step is reported)")->check(CLI::PositiveNumber);
  offload->add_option("--policy", o.policies, "Only this policy (repeatable; default: all four)")
      ->check(CLI::IsMember({"resident", "zero-offload", "chunk-lru", "greedy"}));
  offload->add_option("--overlap", o.overlaps, "Only this overlap mode where AdamW runs on the CPU (repeatable; default: all three)")
      ->check(CLI::IsMember({"backward", "delayed", "pipelined"}));
  offload->add_option("--repeats", o.repeats, "Runs per policy and overlap, each profiled and planned afresh; the table "
                                              "reports the medians (a shared machine's noise)")->check(CLI::PositiveNumber);
  return offload;
}

// `ferry-bench roofline` and its options.
struct RooflineOptions {
  std::string config, gpu = "h100";
  int batch = 16, seq = 0;
  std::vector<std::string> overrides;
};

CLI::App* add_roofline_command(CLI::App& app, RooflineOptions& o, std::string& json, std::string& markdown) {
  auto* roofline =
      app.add_subcommand("roofline",
                         "The least time each op kind of a model's step can take on an H100 or H200 "
                         "(its FLOPs at the peak rate or its bytes at the memory bandwidth); needs no GPU");
  roofline->add_option("-c,--config", o.config, "Experiment file whose model to use")
      ->required()
      ->check(CLI::ExistingFile);
  roofline->add_option("--gpu", o.gpu, "h100 (SXM, the default), h100-pcie or h200")
      ->check(CLI::IsMember({"h100", "h100-pcie", "h200"}));
  roofline->add_option("--batch", o.batch, "Sequences per step (default 16)")->check(CLI::PositiveNumber);
  roofline->add_option("--seq", o.seq, "Tokens per sequence (default: model.seq_len)")->check(CLI::PositiveNumber);
  roofline->add_option("--set", o.overrides, "Config overrides, e.g. train.precision=bf16 (repeatable)");
  roofline->add_option("--json", json, "Also write the results as JSON to this file");
  roofline->add_option("--markdown", markdown, "Also write the Markdown table to this file");
  return roofline;
}

// Parses the command line and runs the chosen benchmark; returns its exit status.
int run(int argc, char** argv) {
  CLI::App app{"ferry-bench: Ferry's benchmarks. Results go to stdout and, with --json, to a file.", "ferry-bench"};
  app.require_subcommand(1);
  std::string config, json, markdown;
  int batch = 4, seq = 0, steps = 5, warmup = 2, threads = 0;
  auto* step = app.add_subcommand("step", "Time CPU training steps of a model shape against oneDNN's matmul rate");
  step->add_option("-c,--config", config, "Experiment file whose model shape to use")->required()->check(CLI::ExistingFile);
  step->add_option("--batch", batch, "Sequences per step")->check(CLI::PositiveNumber);
  step->add_option("--seq", seq, "Tokens per sequence (default: model.seq_len)")->check(CLI::PositiveNumber);
  step->add_option("--steps", steps, "Timed steps (the median is reported)")->check(CLI::PositiveNumber);
  step->add_option("--warmup", warmup, "Untimed steps first")->check(CLI::NonNegativeNumber);
  step->add_option("--threads", threads, "Threads (default: all cores)")->check(CLI::NonNegativeNumber);
  std::string step_device = "cpu";
  std::vector<std::string> step_overrides;
  step->add_option("--device", step_device,
                   "cpu: the op runner against oneDNN's matmul rate; host or cuda: the step `ferry train` runs (the Executor, "
                   "offload.policy resident unless --set says otherwise) on that device, with MFU on an H100/H200")
      ->check(CLI::IsMember({"cpu", "host", "cuda"}));
  step->add_option("--set", step_overrides, "Config overrides for --device host|cuda, e.g. train.precision=bf16 (repeatable)");
  step->add_option("--json", json, "Also write the results as JSON to this file");
  step->add_option("--markdown", markdown, "Also write the results as a Markdown table to this file");

  int64_t params = 100'000'000;
  int reps = 7;
  auto* adam = app.add_subcommand("adam", "CPU AdamW in each mode against the memory bandwidth of its access pattern");
  adam->add_option("--params", params, "Parameters per step (default 100M)")->check(CLI::PositiveNumber);
  adam->add_option("--threads", threads, "Threads (default: 1 and all cores)")->check(CLI::NonNegativeNumber);
  adam->add_option("--reps", reps, "Repetitions (median and best are reported)")->check(CLI::PositiveNumber);
  adam->add_option("--json", json, "Also write the results as JSON to this file (bench/results/cpu_adam.json)");
  adam->add_option("--markdown", markdown, "Also write the Markdown table to this file");
  auto* planner = app.add_subcommand("planner", "The memory Planner against its lower bound and a first-fit allocator");
  planner->add_option("--json", json, "Also write the results as JSON to this file (bench/results/planner.json)");
  planner->add_option("--markdown", markdown, "Also write the Markdown table to this file");
  ferry::bench::PoliciesBenchOptions policy_options;
  std::string policy_overlap = "backward";
  bool single_tier = false;
  CLI::App* policies = add_policies_command(app, policy_options, policy_overlap, single_tier);
  policies->add_option("--json", json, "Also write the results as JSON to this file (bench/results/policies.json)");
  policies->add_option("--markdown", markdown, "Also write the Markdown table to this file");
  std::vector<std::string> offload_overrides;
  ferry::bench::OffloadBenchOptions offload_options;
  auto* offload = add_offload_command(app, offload_options, offload_overrides);
  offload->add_option("--json", json, "Also write the results as JSON to this file (bench/results/offload-host.json)");
  offload->add_option("--markdown", markdown, "Also write the Markdown table to this file");
  auto* experiment = app.add_subcommand("experiment", "Train an experiment file as shipped and record wall time, tokens/s and the "
                                                      "validation loss before and after (the README's figures)");
  experiment->add_option("-c,--config", config, "Experiment file")->required()->check(CLI::ExistingFile);
  experiment->add_option("--set", offload_overrides, "Config overrides (repeatable)");
  experiment->add_option("--json", json, "Also write the results as JSON to this file (bench/results/experiment-<name>.json)");
  experiment->add_option("--markdown", markdown, "Also write the Markdown table to this file");
  int memory_steps = 2;
  std::string memory_config = "configs/gpt2-124m.yaml";
  auto* memory_cmd = app.add_subcommand("memory", "Host memory per parameter of training runs, GPT-2 124M and 350M shapes, each in a "
                                                  "process of its own: peak RSS, device arena, host bytes per parameter");
  memory_cmd->add_option("-c,--config", memory_config, "Experiment file the shapes start from")->check(CLI::ExistingFile)->capture_default_str();
  memory_cmd->add_option("--set", offload_overrides, "Config overrides for every shape, e.g. offload.gpu_budget=1GiB (repeatable)");
  memory_cmd->add_option("--steps", memory_steps, "Training steps per run")->check(CLI::PositiveNumber);
  memory_cmd->add_option("--json", json, "Also write the results as JSON to this file (bench/results/memory.json)");
  memory_cmd->add_option("--markdown", markdown, "Also write the Markdown table to this file");
  RooflineOptions roofline_options;
  auto* roofline = add_roofline_command(app, roofline_options, json, markdown);
  int pcie_reps = 9;
  auto* pcie = app.add_subcommand("pcie", "Host<->device copy bandwidth from the pinned pool, 64 KiB to 1 GiB (needs a GPU)");
  pcie->add_option("--reps", pcie_reps, "Copies per size (the median is reported)")->check(CLI::PositiveNumber);
  pcie->add_option("--json", json, "Also write the results as JSON to this file (bench/results/pcie-<gpu>.json)");
  pcie->add_option("--markdown", markdown, "Also write the Markdown table to this file");
  CLI11_PARSE(app, argc, argv);

  std::string command = "ferry-bench";
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  try {
    if (*experiment) return ferry::bench::run_experiment_bench(config, offload_overrides, json, markdown, command);
    if (*memory_cmd) return ferry::bench::run_memory_bench(memory_config, offload_overrides, memory_steps, json, markdown, command);
    if (*pcie) return ferry::bench::run_pcie_bench(pcie_reps, json, markdown, command);
    if (*roofline) {
      const RooflineOptions& r = roofline_options;
      return ferry::bench::run_roofline_bench(r.config, r.overrides, r.gpu, r.batch, r.seq, json, markdown, command);
    }
    if (*offload) {
      offload_options.overrides = offload_overrides;
      offload_options.json = json, offload_options.markdown = markdown, offload_options.command = command;
      return ferry::bench::run_offload_bench(offload_options);
    }
    if (*policies) {
      policy_options.overlap = policy_overlap;
      policy_options.mixed_tiers = !single_tier;
      policy_options.json = json, policy_options.markdown = markdown, policy_options.command = command;
      return ferry::bench::run_policies_bench(policy_options);
    }
    if (*planner) return ferry::bench::run_planner_bench(json, markdown, command);
    if (*adam) return ferry::bench::run_adam_bench(params, threads, reps, json, markdown, command);
    if (step_device != "cpu")
      return ferry::bench::run_device_step_bench(config, step_overrides, step_device, batch, seq, steps, warmup, json, markdown, command);
    return ferry::bench::run_step_bench(config, batch, seq, steps, warmup, threads, json, markdown, command);
  } catch (const std::exception& e) {
    ferry::console::print(stderr, "ferry-bench: error: {}\n", e.what());
    return 1;
  }
}

}  // namespace

// The tables on stdout are a benchmark's result: stdout that could not take them fails it (74), as for ferry plan.
int main(int argc, char** argv) {
  ferry::run_with_sleeping_openmp_threads(argv);
  ferry::console::start();
  return ferry::console::finish(run(argc, argv), true, "ferry-bench");
}
