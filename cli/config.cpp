// `ferry config`: every key of an experiment file, from the one table in engine/config_schema.cpp: as text, or
// as the Markdown of docs/config.md (--markdown), which a test keeps equal to the committed file.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <memory>

#include "cli/commands.h"
#include "engine/config_schema.h"
#include "foundation/console.h"

namespace ferry::cli {

Command add_config(CLI::App& app) {
  auto markdown = std::make_shared<bool>(false);
  auto* config = app.add_subcommand("config", "List every key of an experiment file: type, allowed values, default, meaning");
  config->add_flag("--markdown", *markdown, "Print the list as docs/config.md (regenerate it with: ferry config --markdown > docs/config.md)");
  return {config,
          [markdown] {
            console::print("{}", *markdown ? engine::config_markdown() : engine::config_keys_text());
            return 0;
          },
          true};
}

}  // namespace ferry::cli
