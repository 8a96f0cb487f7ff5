// `ferry export`: a checkpoint's weights as a Hugging Face model folder.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli/commands.h"
#include "formats/export.h"

namespace ferry::cli {

Command add_export(CLI::App& app) {
  struct ExportArgs {
    std::string checkpoint, out;
  };
  auto args = std::make_shared<ExportArgs>();
  auto* exporter = app.add_subcommand("export", "Write a checkpoint's weights as a Hugging Face model folder "
                                                "(model.safetensors + config.json for GPT2LMHeadModel or BertForMaskedLM)");
  exporter->add_option("--checkpoint", args->checkpoint, "A checkpoint folder, or a train.checkpoint_dir (the newest)")
      ->required();
  exporter->add_option("--out", args->out, "Folder to write")->required();
  return {exporter, [args] {
            const auto exported = formats::export_checkpoint(args->checkpoint, args->out);
            fmt::print("exported {} (step {}{}): wrote {}/model.safetensors and config.json\n", exported.folder.string(),
                       exported.step, exported.verified ? ", checksums verified" : ", written before checksums: not verified",
                       args->out);
            return 0;
          }};
}

}  // namespace ferry::cli
