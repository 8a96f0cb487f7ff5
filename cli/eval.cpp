// `ferry eval`: the validation loss (and perplexity) of a model without a training step: the config's own
// weights (model.init_from, else its initialisation) or a checkpoint's, evaluated on the device.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/option_checks.h"
#include "engine/config.h"
#include "engine/trainer.h"
#include "foundation/console.h"

namespace ferry::cli {
namespace {

struct EvalArgs {
  std::string config_path, checkpoint;
  std::vector<std::string> overrides;
  int batches = 0;
};

int run_eval(EvalArgs args) {
  if (args.batches > 0) args.overrides.push_back("train.eval_batches=" + std::to_string(args.batches));
  const engine::Config cfg = engine::load_config(args.config_path, args.overrides);
  engine::EvalOptions opt;
  opt.checkpoint = args.checkpoint;
  const engine::EvalSummary e = engine::evaluate(cfg, opt);
  console::print("val loss {:.4f} (perplexity {:.2f}) over {} batch(es), {} tokens | weights: {}\n", e.val_loss,
                 std::exp(double(e.val_loss)), e.batches, e.tokens, e.weights);
  return 0;
}

}  // namespace

Command add_eval(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  auto* eval =
      app.add_subcommand("eval", "Validation loss and perplexity of a model, without training (GPT-2, Llama or BERT)");
  eval->add_option("-c,--config", args->config_path, "Experiment file (YAML): the model, the data and its validation split")
      ->required()
      ->check(CLI::ExistingFile);
  eval->add_option("--checkpoint", args->checkpoint, "A checkpoint folder; a run folder or train.checkpoint_dir (its newest); an "
                                                     "experiment folder, e.g. runs/gpt-tiny (its newest run's newest); default: the "
                                                     "config's weights (model.init_from, else its initialisation)");
  eval->add_option("--batches", args->batches, "Validation batches (default train.eval_batches)")->transform(integer_in(1, INT32_MAX));
  eval->add_option("--set", args->overrides, "Override any config key, e.g. --set train.batch_size=4 (repeatable)");
  eval->footer("Example: ferry eval --config configs/gpt-tiny.yaml --checkpoint runs/gpt-tiny");
  return {eval, [args] { return run_eval(*args); }, true};
}

}  // namespace ferry::cli
