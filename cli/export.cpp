// `ferry export`: a checkpoint's weights, or those a run of a config starts from, as a Hugging Face model
// folder, with the source model's untrained tensors, settings and other files when it came from model.init_from.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "engine/config.h"
#include "engine/trainer.h"
#include "formats/export.h"
#include "foundation/output_paths.h"
#include "foundation/console.h"

namespace ferry::cli {
namespace {

constexpr const char* kExportFooter =
    "Examples:\n"
    "  ferry export --checkpoint runs/bert-tiny --out exports/bert-tiny\n"
    "  ferry export --config configs/my-finetune.yaml --out exports/start   (no step trained: model.init_from's\n"
    "      weights byte for byte, or the initialisation of train.seed)\n"
    "A model from model.init_from takes along its tensors Ferry does not train (BERT's pooler, ...), its\n"
    "config.json settings and its folder's other files (tokenizer, sentence-transformers' modules.json,\n"
    "1_Pooling/, README.md, ...); its weights in other formats (pytorch_model.bin, onnx/, ...) are left out.\n"
    "A run's own vocabulary goes along as the files transformers' AutoTokenizer reads: with data.tokenizer: hf,\n"
    "its tokenizer.json and a tokenizer_config.json naming PreTrainedTokenizerFast and the run's BOS and EOS.\n"
    "The export never deletes a file: into a folder that holds files already only with --overwrite, which\n"
    "replaces the files the export writes and keeps every other.";

struct ExportArgs {
  std::string checkpoint, config_path, out, source;
  std::vector<std::string> overrides;
  bool overwrite = false;
};

void print_report(const formats::ExportReport& r, const ExportArgs& args) {
  if (!r.folder.empty())
    console::print("exported {} (step {}{}) into {}\n", r.folder.string(), r.step,
                   r.verified ? ", checksums verified" : ", written before checksums: not verified", args.out);
  else
    console::print("exported the weights a run of {} starts from (no step trained: {}) into {}\n", args.config_path,
                   r.source.empty() ? "the initialisation of train.seed" : "model.init_from's, byte for byte",
                   args.out);
  if (!r.initialised.empty())
    console::print("initialised from train.seed (model.init_from lacks them; model.init_missing): {}\n",
                   fmt::join(r.initialised, ", "));
  console::print("wrote: {}\n", fmt::join(r.files, ", "));
  if (!r.replaced.empty()) console::print("replaced (--overwrite): {}\n", fmt::join(r.replaced, ", "));
  if (!r.kept.empty()) console::print("kept, not written by this export: {}\n", fmt::join(r.kept, ", "));
  if (!r.source.empty()) {
    const std::string tensors = r.carried.empty() ? "" : fmt::format(" and {} tensor(s) Ferry does not train: {}", r.carried.size(),
                                                                       fmt::join(r.carried, ", "));
    console::print("from the source '{}': config.json's settings{}\n", r.source.string(), tensors);
    if (!r.carried_files.empty()) console::print("copied from the source: {}\n", fmt::join(r.carried_files, ", "));
    if (!r.left_out.empty()) console::print("not copied from the source: {}\n", fmt::join(r.left_out, ", "));
  }
  if (!r.note.empty()) console::print("note: {}\n", r.note);
}

// --out against what the export reads (the checkpoint, its source model and tokenizer files, or the config's
// run's inputs): never one of them, nor inside one of their folders.
void refuse_out_over_inputs(const ExportArgs& args, const engine::Config* cfg) {
  std::vector<PathUse> paths{{"--out", args.out, PathUse::Kind::OutputFolder}};
  if (cfg) {
    for (PathUse& use : engine::run_inputs(*cfg)) paths.push_back(std::move(use));
    paths.push_back({"--config", args.config_path});
  } else {
    try {
      const auto [state, dir] = formats::read_checkpoint_state(args.checkpoint);
      paths.insert(paths.end(), {{"--checkpoint", dir},
                                 {"the run's model.init_from", state.origin.init_from},
                                 {"the run's vocabulary", state.origin.vocab},
                                 {"the run's merges", state.origin.merges}});
    } catch (const std::runtime_error&) {  // the export's own error says what is wrong with it
    }
    if (args.source != "none") paths.push_back({"--source", args.source});
  }
  refuse_outputs_over_inputs(paths);
}

int run_export(const ExportArgs& args) {
  formats::ExportOptions options;
  options.overwrite = args.overwrite;
  if (!args.config_path.empty()) {
    const engine::Config cfg = engine::load_config(args.config_path, args.overrides);
    refuse_out_over_inputs(args, &cfg);
    print_report(formats::export_starting_point(engine::starting_point(cfg), args.out, options), args);
    return 0;
  }
  refuse_out_over_inputs(args, nullptr);
  if (args.source == "none") options.source = std::filesystem::path();
  else if (!args.source.empty()) options.source = args.source;
  print_report(formats::export_checkpoint(args.checkpoint, args.out, options), args);
  return 0;
}

}  // namespace

Command add_export(CLI::App& app) {
  auto args = std::make_shared<ExportArgs>();
  auto* exporter =
      app.add_subcommand("export",
                         "Write a model as a Hugging Face folder (model.safetensors, config.json and tokenizer "
                         "files, for GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM or BertForMaskedLM): a "
                         "checkpoint's weights, or with "
                         "--config those a run starts from");
  auto* checkpoint = exporter->add_option("--checkpoint", args->checkpoint,
                                         "A checkpoint folder; a run folder or train.checkpoint_dir (its newest); an experiment "
                                         "folder such as runs/gpt-tiny (its newest run's newest)");
  auto* config = exporter->add_option("-c,--config", args->config_path, "Instead of --checkpoint: an experiment file (YAML) whose "
                                                                        "starting weights to export, with no step trained "
                                                                        "(model.init_from's, else the initialisation of train.seed)")
                     ->check(CLI::ExistingFile)
                     ->excludes(checkpoint);
  exporter->add_option("--set", args->overrides, "With --config: override any config key, e.g. --set train.seed=7 (repeatable)")
      ->needs(config);
  exporter->add_option("--out", args->out, "Folder to write (new or empty, unless --overwrite)")->required();
  exporter->add_flag("--overwrite", args->overwrite, "Write into a folder that holds files already: the export's own files there "
                                                     "are replaced, every other is kept (nothing is deleted)");
  exporter->add_option("--source", args->source, "With --checkpoint: the Hugging Face model the run started from, whose untrained "
                                                 "tensors (BERT's pooler, ...), config.json and other files the export carries; "
                                                 "default: the run's model.init_from; none: without them")
      ->excludes(config);
  exporter->footer(kExportFooter);
  return {exporter, [args] {
            if (args->checkpoint.empty() && args->config_path.empty()) {
              console::print(
                  stderr,
                  "--checkpoint or --config is required: the checkpoint to export, or the experiment whose starting "
                  "weights to export\nRun with --help for more information.\n");
              return 2;
            }
            return run_export(*args);
          }};
}

}  // namespace ferry::cli
