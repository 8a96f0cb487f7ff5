// ferry: the command-line trainer. `ferry train --config FILE` runs an experiment from a YAML file.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>

#include "engine/config.h"
#include "formats/export.h"
#include "cli/plan.h"
#include "cli/sample.h"
#include "dataset/token_shard.h"
#include "dataset/tokenizer.h"
#include "engine/progress.h"
#include "engine/trainer.h"

namespace {

constexpr const char* kDescription =
    "Ferry trains GPT models on one device, keeping model state in host memory.\n"
    "Experiments are YAML files (see configs/); every key is documented in README.md.";

constexpr const char* kTrainFooter =
    "Sections and keys of the config file:\n"
    "  model:  kind (gpt2 | bert), n_layer, n_head, n_embd, vocab_size, seq_len, init_from (HF safetensors)\n"
    "  data:   path (relative to the config file), tokenizer (byte), val_fraction,\n"
    "          mask_token_id (BERT's [MASK]; default the last id of the vocabulary)\n"
    "  optim:  lr, betas [b1, b2], eps, weight_decay, grad_clip (0: off), warmup_steps,\n"
    "          schedule (cosine | constant), min_lr (cosine floor, default lr/10),\n"
    "          cpu_threads (AdamW threads, 0: all cores), isa (auto | avx512 | avx2 | scalar;\n"
    "          the environment variable FERRY_CPU_ISA overrides it)\n"
    "  train:  batch_size, grad_accum, steps, seed, log_every, eval_every (0: start and end),\n"
    "          checkpoint_dir, checkpoint_every (0: at the end and when interrupted), keep_checkpoints,\n"
    "          eval_batches, threads (the model's ops, 0: all cores),\n"
    "          activation_checkpointing (auto | true | false), precision (bf16 | fp16: dynamic loss\n"
    "          scaling from loss_scale_init, doubling after loss_scale_growth_interval good steps)\n"
    "  offload: policy (resident | zero-offload | chunk-lru | greedy), gpu_budget (e.g. 6GiB, 48MiB;\n"
    "          unset: what resident needs), bucket_mb (auto | MiB per parameter bucket),\n"
    "          overlap (backward | delayed: AdamW one step behind, as ZeRO-Offload's DPU),\n"
    "          sync_steps (delayed: the first steps update synchronously), cost_model (JSON file;\n"
    "          unset: the host device is measured once and cached)\n"
    "  device: auto | cpu | cuda, or {kind: cpu, host: {link_gbps: 16}} (the host device's copies\n"
    "          throttled like a PCIe link)\n"
    "Example: ferry train --config configs/gpt-tiny.yaml --steps 50 --set offload.policy=greedy \\\n"
    "           --set offload.gpu_budget=48MiB --set device.host.link_gbps=8 --trace trace.json";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{kDescription, "ferry"};
  app.require_subcommand(1);

  std::string config_path, metrics_path;
  std::vector<std::string> overrides;
  int steps = 0;
  long long seed = -1;
  auto* train = app.add_subcommand("train", "Train a model from a YAML experiment file");
  train->add_option("-c,--config", config_path, "Experiment file (YAML)")->required()->check(CLI::ExistingFile);
  train->add_option("--steps", steps, "Override train.steps")->check(CLI::PositiveNumber);
  train->add_option("--seed", seed, "Override train.seed")->check(CLI::NonNegativeNumber);
  train->add_option("--metrics", metrics_path, "Write one JSON line per step to this file "
                                                "(step, loss, val_loss when evaluated, lr, grad_norm, tokens_per_s, elapsed_s, "
                                                "step_s, predicted_step_s, stall_s, h2d_bytes, d2h_bytes, peak_device_bytes; "
                                                "loss_scale with fp16)");
  std::string trace_path;
  int trace_steps = 2;
  train->add_option("--trace", trace_path, "Write a Chrome/Perfetto trace (open in ui.perfetto.dev): a track per stream "
                                           "and the CPU AdamW worker, a slice per op, copy and optimizer task");
  train->add_option("--trace-steps", trace_steps, "Steps the trace covers, from the first (default 2)")->check(CLI::PositiveNumber);
  train->add_option("--set", overrides, "Override any config key, e.g. --set optim.lr=1e-3 (repeatable)");
  std::string resume;
  train->add_option("--resume", resume, "Continue from a checkpoint folder, or the newest in a train.checkpoint_dir; "
                                        "the config must match the run that wrote it");
  train->footer(kTrainFooter);

  std::string plan_config, plan_policy, plan_budget, plan_json;
  std::vector<std::string> plan_overrides;
  auto* plan = app.add_subcommand("plan", "Plan the offload of an experiment without training: fit, placement, "
                                          "predicted step time, all policies side by side");
  plan->add_option("-c,--config", plan_config, "Experiment file (YAML)")->required()->check(CLI::ExistingFile);
  plan->add_option("--budget", plan_budget, "Device memory budget, e.g. 8GiB or 512MiB (default: offload.gpu_budget)");
  plan->add_option("--policy", plan_policy, "resident | zero-offload | chunk-lru | greedy (default: offload.policy)");
  plan->add_option("--json", plan_json, "Also write the plan as JSON (policy, fits, budget_bytes, peak_device_bytes, "
                                        "predicted_step_s, lower_bound_step_s, h2d_bytes, d2h_bytes, resident_bytes, "
                                        "offloaded_bytes, and every policy under policies)");
  plan->add_option("--set", plan_overrides, "Override any config key, e.g. --set offload.bucket_mb=64 (repeatable)");
  plan->footer("Exit status: 0 when the plan fits the budget, 3 when it does not.\n"
               "offload.cost_model: a JSON cost model (configs/cost_models/h100-assumed.json plans for an H100 on\n"
               "any machine); without one, the host device is measured at start-up (about a second).");

  ferry::cli::SampleOptions sample_opt;
  std::string sample_checkpoint;
  auto* sample = app.add_subcommand("sample", "Generate text from a GPT checkpoint written by `ferry train`");
  sample->add_option("--checkpoint", sample_checkpoint, "A checkpoint folder, or a train.checkpoint_dir (the newest)")
      ->required();
  sample->add_option("--prompt", sample_opt.prompt, "Text to continue");
  sample->add_option("--tokens", sample_opt.tokens, "Tokens to generate (default 200)")->check(CLI::NonNegativeNumber);
  sample->add_option("--temperature", sample_opt.temperature, "Softmax temperature; 0 picks the most likely token (default 0.8)")
      ->check(CLI::NonNegativeNumber);
  sample->add_option("--top-k", sample_opt.top_k, "Sample among the k most likely tokens; 0: all (default 0)")
      ->check(CLI::NonNegativeNumber);
  sample->add_option("--seed", sample_opt.seed, "Seed of the sampling (default 1)");

  std::string export_checkpoint, export_out;
  auto* exporter = app.add_subcommand("export", "Write a checkpoint's weights as a Hugging Face model folder "
                                                "(model.safetensors + config.json for GPT2LMHeadModel)");
  exporter->add_option("--checkpoint", export_checkpoint, "A checkpoint folder, or a train.checkpoint_dir (the newest)")
      ->required();
  exporter->add_option("--out", export_out, "Folder to write")->required();

  std::string tok_kind = "byte", tok_vocab, tok_merges, tok_input, tok_out;
  auto* tokenize = app.add_subcommand("tokenize", "Tokenise a text file into a uint16 token shard (llm.c's format) "
                                                  "that data.path can name");
  tokenize->add_option("--tokenizer", tok_kind, "byte | gpt2 | wordpiece (default byte)")
      ->check(CLI::IsMember({"byte", "gpt2", "wordpiece"}));
  tokenize->add_option("--vocab", tok_vocab, "gpt2: vocab.json; wordpiece: vocab.txt")->check(CLI::ExistingFile);
  bool tok_cased = false;
  tokenize->add_flag("--cased", tok_cased, "wordpiece: keep case and accents (cased BERT vocabularies)");
  tokenize->add_option("--merges", tok_merges, "gpt2: merges.txt")->check(CLI::ExistingFile);
  tokenize->add_option("--input", tok_input, "Text file")->required()->check(CLI::ExistingFile);
  tokenize->add_option("--out", tok_out, "Shard to write")->required();

  CLI11_PARSE(app, argc, argv);

  try {
    if (*tokenize) {
      if (tok_kind == "gpt2" && (tok_vocab.empty() || tok_merges.empty()))
        throw std::runtime_error("--tokenizer gpt2 needs --vocab vocab.json and --merges merges.txt");
      if (tok_kind == "wordpiece" && tok_vocab.empty()) throw std::runtime_error("--tokenizer wordpiece needs --vocab vocab.txt");
      const auto tokenizer = tok_kind == "gpt2"        ? ferry::dataset::load_gpt2_bpe(tok_vocab, tok_merges)
                             : tok_kind == "wordpiece" ? ferry::dataset::load_wordpiece(tok_vocab, !tok_cased)
                                                       : ferry::dataset::make_byte_tokenizer();
      std::ifstream in(tok_input, std::ios::binary);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const auto ids = tokenizer->encode(text);
      ferry::dataset::write_token_shard(tok_out, ids);
      fmt::print("{}: {} bytes -> {} tokens (vocabulary {}); set model.vocab_size to at least {}\n", tok_out,
                 text.size(), ids.size(), tokenizer->vocab_size(), tokenizer->vocab_size());
      if (tok_kind == "wordpiece")
        fmt::print("for BERT, set data.mask_token_id to {} (the vocabulary's [MASK])\n",
                   ferry::dataset::wordpiece_token_id(tok_vocab, "[MASK]"));
      return 0;
    }
    if (*exporter) {
      ferry::formats::export_checkpoint(export_checkpoint, export_out);
      fmt::print("wrote {}/model.safetensors and config.json\n", export_out);
      return 0;
    }
    if (*sample) {
      sample_opt.checkpoint = sample_checkpoint;
      fmt::print("{}\n", ferry::cli::sample(sample_opt));
      return 0;
    }
    if (*plan) {
      ferry::cli::PlanOptions opt;
      opt.policy = plan_policy;
      opt.json = plan_json;
      if (!plan_budget.empty()) opt.budget = ferry::engine::parse_bytes(plan_budget);
      return ferry::cli::run_plan(ferry::engine::load_config(plan_config, plan_overrides), opt);
    }
    if (steps > 0) overrides.push_back("train.steps=" + std::to_string(steps));
    if (seed >= 0) overrides.push_back("train.seed=" + std::to_string(seed));
    const ferry::engine::Config cfg = ferry::engine::load_config(config_path, overrides);
    ferry::engine::TrainOptions opt;
    opt.metrics = metrics_path;
    opt.resume = resume;
    opt.trace = trace_path;
    opt.trace_steps = trace_steps;
    // Ctrl-C / SIGTERM: finish the step, write a checkpoint (with train.checkpoint_dir), exit cleanly.
    static std::atomic<bool> stop{false};
    std::signal(SIGINT, [](int) { stop = true; });
    std::signal(SIGTERM, [](int) { stop = true; });
    opt.stop = &stop;
    const auto s = ferry::engine::train(cfg, opt);
    if (s.interrupted) {
      fmt::print("interrupted after step {}{}\n", s.steps,
                 s.last_checkpoint.empty() ? std::string(" (no train.checkpoint_dir: nothing saved)")
                                           : "; resume with --resume " + s.last_checkpoint.string());
      return 130;
    }
    fmt::print("done: {} steps in {} | train loss {:.4f} | val loss {:.4f} (from {:.4f}, {:+.1f}%) | {:.0f} tokens/s\n",
               s.steps, ferry::engine::format_duration(s.wall_s), s.train_loss, s.val_loss, s.val_loss_start,
               100.0 * (s.val_loss - s.val_loss_start) / s.val_loss_start, s.tokens_per_s);
  } catch (const std::exception& e) {
    std::fflush(stderr);
    fmt::print(stderr, "\nferry: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
