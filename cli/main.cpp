// ferry: the command-line trainer. Builds the app from the subcommands (one file each), runs the chosen one
// and turns an error into `ferry: error: ...` and exit status 1; a command line that does not parse exits 2;
// output that stdout could not take fails a command run for its output (74; console::finish).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <vector>

#include "cli/commands.h"
#include "cli/version.h"
#include "foundation/console.h"
#include "foundation/openmp_wait.h"

namespace {

constexpr const char* kDescription =
    "Ferry trains GPT-2, Llama-family and BERT models on one device, keeping model state in host memory.\n"
    "Experiments are YAML files (see configs/); `ferry config` lists every key (docs/config.md).";

// A command line that does not parse (an unknown command or option, a value out of range) is a usage error:
// exit status 2, whatever CLI11's own code for it, so that scripts can tell it from bad input found while
// running (1). --help exits 0.
// --help and --version are run for what they print.
int usage_exit(const CLI::App& app, const CLI::Error& e) {
  return ferry::console::finish(app.exit(e) == 0 ? 0 : 2, true, "ferry");
}

}  // namespace

int main(int argc, char** argv) {
  ferry::run_with_sleeping_openmp_threads(argv);
  ferry::console::start();
  CLI::App app{kDescription, "ferry"};
  app.require_subcommand(1);
  app.set_version_flag("--version", ferry::cli::version_text,
                       "Print the version, the commit, the CUDA build and the CPU AdamW kernel, and exit");
  const std::vector<ferry::cli::Command> commands{ferry::cli::add_train(app, argv[0]), ferry::cli::add_plan(app),
                                                  ferry::cli::add_sample(app), ferry::cli::add_export(app),
                                                  ferry::cli::add_tokenize(app), ferry::cli::add_eval(app),
                                                  ferry::cli::add_config(app)};
  // CLI11 takes an unknown first word for a stray argument and says only that a subcommand is required.
  if (argc > 1 && argv[1][0] != '-' &&
      std::none_of(commands.begin(), commands.end(), [&](const auto& c) { return c.app->check_name(argv[1]); }))
    return usage_exit(app, CLI::ExtrasError(fmt::format("unknown command '{}'; expected one of train, eval, plan, sample, export, tokenize, config",
                                                         argv[1]),
                                             CLI::ExitCodes::ExtrasError));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return usage_exit(app, e);
  }

  for (const auto& command : commands) {
    if (!*command.app) continue;
    int status = 1;
    try {
      status = command.run();
    } catch (const std::exception& e) {
      ferry::console::flush(stdout);  // what the command printed comes before why it stopped
      ferry::console::print(stderr, "\nferry: error: {}\n", e.what());
    }
    return ferry::console::finish(status, command.stdout_is_result, "ferry");
  }
  return 0;
}
