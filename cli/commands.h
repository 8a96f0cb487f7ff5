// The ferry subcommands: each adds itself, with its options and help, to the CLI11 app and says how to run.
// main() parses and runs the one chosen; the exit status is what `run` returns.
#pragma once

#include <functional>
#include <string>

namespace CLI {
class App;
}

namespace ferry::cli {

struct Command {
  CLI::App* app;            // the subcommand: true when chosen on the command line
  std::function<int()> run;  // runs it with the parsed options; returns the exit status, throws on error
  // plan, eval, sample, config: what they print is what they are run for, so stdout that could not take it
  // fails them (console::finish); train, export and tokenize are run for the files they write.
  bool stdout_is_result = false;
};

Command add_train(CLI::App& app, const std::string& program);  // cli/train.cpp; program: argv[0], for the commands it prints
Command add_plan(CLI::App& app);      // cli/plan.cpp
Command add_sample(CLI::App& app);    // cli/sample.cpp
Command add_export(CLI::App& app);    // cli/export.cpp
Command add_tokenize(CLI::App& app);  // cli/tokenize.cpp
Command add_eval(CLI::App& app);      // cli/eval.cpp
Command add_config(CLI::App& app);    // cli/config.cpp

}  // namespace ferry::cli
