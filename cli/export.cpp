// `ferry export`: a checkpoint's weights as a Hugging Face model folder, with the source model's untrained
// tensors, settings and tokenizer files when the run started from model.init_from.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>
#include <string>

#include "cli/commands.h"
#include "formats/export.h"

namespace ferry::cli {

Command add_export(CLI::App& app) {
  struct ExportArgs {
    std::string checkpoint, out, source;
  };
  auto args = std::make_shared<ExportArgs>();
  auto* exporter = app.add_subcommand("export", "Write a checkpoint's weights as a Hugging Face model folder (model.safetensors, "
                                                "config.json and tokenizer files, for GPT2LMHeadModel or BertForMaskedLM)");
  exporter->add_option("--checkpoint", args->checkpoint, "A checkpoint folder, or a train.checkpoint_dir (the newest)")
      ->required();
  exporter->add_option("--out", args->out, "Folder to write")->required();
  exporter->add_option("--source", args->source, "The Hugging Face model the run started from, whose untrained tensors (BERT's "
                                                 "pooler, ...), config.json and tokenizer files the export carries; default: the "
                                                 "run's model.init_from; none: without them");
  return {exporter, [args] {
            formats::ExportOptions options;
            if (args->source == "none") options.source = std::filesystem::path();
            else if (!args->source.empty()) options.source = args->source;
            const auto exported = formats::export_checkpoint(args->checkpoint, args->out, options);
            fmt::print("exported {} (step {}{}): wrote {} in {}\n", exported.folder.string(), exported.step,
                       exported.verified ? ", checksums verified" : ", written before checksums: not verified",
                       fmt::join(exported.files, ", "), args->out);
            if (!exported.source.empty())
              fmt::print("from the source '{}': config.json's settings and {} tensor(s) Ferry does not train{}{}\n", exported.source.string(),
                         exported.carried.size(), exported.carried.empty() ? "" : ": ", fmt::join(exported.carried, ", "));
            if (!exported.note.empty()) fmt::print("note: {}\n", exported.note);
            return 0;
          }};
}

}  // namespace ferry::cli
