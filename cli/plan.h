// `ferry plan`: the offload plan of an experiment without training, for the device `ferry train` takes: whether it fits the device
// budget and the host memory, what stays resident and what travels, activation memory, the predicted step time beside its lower
// bound, the top stalls, and all four policies side by side.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "engine/config.h"

namespace ferry::cli {

struct PlanOptions {
  std::string policy;               // empty: offload.policy
  int64_t budget = 0;               // bytes; 0: offload.gpu_budget, else as `ferry train` takes it
  std::filesystem::path json;       // also write the plan as JSON
  // --max-model[=SHAPE]: the largest model instead of one plan; SHAPE a name of max_model_help's, empty: the config's
  std::optional<std::string> max_model;
  std::string train_command;  // `ferry train --config X --set ...`: the config and settings the plan was given
};

// Prints the plan to stdout for the device `ferry train` takes here, with the budget it takes (--budget, else
// offload.gpu_budget, else a GPU's free memory less a margin, else what resident needs), ending with one verdict
// line. Returns 0 when the chosen policy fits the budget and the machine's host memory, 3 when it does not.
int print_plan(const engine::Config& config, const PlanOptions& options);

// --max-model: the largest model of the config's kind at its width (or the width options.max_model names, its
// overrides applied to `config` already) that fits the budget and the host memory, its layers bisected with the
// plan `ferry plan` makes. Prints it with its plan, what stops one more layer (device, host or both) and the
// command that trains it. Returns 0, or 3 when not even one layer fits (the last line says why).
int print_max_model(const engine::Config& config, const PlanOptions& options);
// The --set overrides of a named shape (model.n_embd, n_head, ...) for a model of `kind` (an error when the shape
// is another kind's), and --max-model's help, which names them.
std::vector<std::string> max_model_shape_overrides(const std::string& shape, const std::string& kind);
std::string max_model_help();

}  // namespace ferry::cli
