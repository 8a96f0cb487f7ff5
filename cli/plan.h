// `ferry plan`: the offload plan of an experiment without training: whether it fits the device budget,
// what stays resident and what travels, activation memory, the predicted step time beside its lower
// bound, the top stalls, and all four policies side by side.
#pragma once

#include <filesystem>
#include <string>

#include "engine/config.h"

namespace ferry::cli {

struct PlanOptions {
  std::string policy;               // empty: offload.policy
  int64_t budget = 0;               // bytes; 0: offload.gpu_budget
  std::filesystem::path json;       // also write the plan as JSON
};

// Prints the plan to stdout. Returns 0 when the chosen policy fits the budget, 3 when it does not.
int print_plan(const engine::Config& config, const PlanOptions& options);

}  // namespace ferry::cli
