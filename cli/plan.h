// `ferry plan`: the offload plan of an experiment without training, for the device `ferry train` takes: whether it fits the device
// budget and the host memory, what stays resident and what travels, activation memory, the predicted step time beside its lower
// bound, the top stalls, and all four policies side by side.
#pragma once

#include <filesystem>
#include <string>

#include "engine/config.h"

namespace ferry::cli {

struct PlanOptions {
  std::string policy;               // empty: offload.policy
  int64_t budget = 0;               // bytes; 0: offload.gpu_budget, else as `ferry train` takes it
  std::filesystem::path json;       // also write the plan as JSON
};

// Prints the plan to stdout for the device `ferry train` takes here, with the budget it takes (--budget, else
// offload.gpu_budget, else a GPU's free memory less a margin, else what resident needs), ending with one verdict
// line. Returns 0 when the chosen policy fits the budget and the machine's host memory, 3 when it does not.
int print_plan(const engine::Config& config, const PlanOptions& options);

}  // namespace ferry::cli
