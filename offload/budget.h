// What a budget cannot hold, and the message that says so with the fix: every policy's BudgetError (and
// plan_step's) is built from a BudgetShortfall by budget_message.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "offload/problem.h"

namespace ferry::offload {

struct BudgetShortfall {
  int64_t budget_bytes = 0;
  int64_t needed_bytes = 0;
  std::string needed_by;        // "this model", "policy resident", "greedy's smallest plan"
  std::string placement;        // "with every bucket offloaded"; may be empty
  int64_t workspace_bytes = 0;  // of needed_bytes, the libraries' workspace (named in the message when > 0)
  int recomputed_blocks = 0, blocks = 0;
  bool suggest_greedy = false;         // an offloading policy could fit where this one cannot
  bool suggest_checkpointing = false;  // recomputing more blocks would make it fit (or might, from make_schedule)
};
// "offload.gpu_budget: 2 GiB is below the 3.1 GiB this model needs with every bucket offloaded and 0 of
// 12 blocks recomputed (64 MiB of it the device libraries' workspace); raise it or set
// train.activation_checkpointing: auto"
std::string budget_message(const BudgetShortfall& shortfall);

// The budget cannot hold what the policy must keep on the device.
struct BudgetError : std::runtime_error {
  explicit BudgetError(BudgetShortfall s) : std::runtime_error(budget_message(s)), shortfall(std::move(s)) {}
  BudgetShortfall shortfall;
};

// The least device memory any policy can run in: at every op, its activations, the buckets it uses and
// the gradient buffers it writes; and the libraries' workspace throughout.
int64_t minimum_device_bytes(const OffloadProblem& problem);

}  // namespace ferry::offload
