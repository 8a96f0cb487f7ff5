// What a budget cannot hold, said with the fix: the message every BudgetError carries, and the least device
// memory any policy can run in.
#include "offload/budget.h"

#include <algorithm>

#include "memory/host_buffer.h"
#include "offload/policy_parts.h"

namespace ferry::offload {

std::string budget_message(const BudgetShortfall& s) {
  std::vector<std::string> fixes{"raise it"};
  if (s.suggest_greedy) fixes.push_back("set offload.policy: greedy");
  if (s.suggest_checkpointing) fixes.push_back("set train.activation_checkpointing: auto");
  std::string fix = fixes[0];
  for (size_t i = 1; i < fixes.size(); ++i) fix += (i + 1 == fixes.size() ? " or " : ", ") + fixes[i];
  std::string budget = memory::format_bytes(s.budget_bytes), needed = memory::format_bytes(s.needed_bytes);
  if (budget == needed) {  // rounded alike: the bytes tell them apart
    budget += " (" + std::to_string(s.budget_bytes) + " bytes)";
    needed += " (" + std::to_string(s.needed_bytes) + " bytes)";
  }
  std::string how = s.placement;
  if (s.blocks > 0) {
    const std::string blocks =
        std::to_string(s.recomputed_blocks) + " of " + std::to_string(s.blocks) + " blocks recomputed";
    how = how.empty() ? "with " + blocks : how + " and " + blocks;
  }
  if (s.workspace_bytes > 0)  // the device sized it, not the config: say what part of the need it is
    how += std::string(how.empty() ? "(" : " (") + memory::format_bytes(s.workspace_bytes) +
           " of it the device libraries' workspace)";
  return "offload.gpu_budget: " + budget + " is below the " + needed + " " + s.needed_by + " needs" +
         (how.empty() ? "" : " " + how) + "; " + fix;
}

int64_t minimum_device_bytes(const OffloadProblem& p) {
  int64_t need = 0;
  for (int i = 0; i < p.n_ops; ++i) {
    int64_t at = p.workspace_bytes + p.activation_live[i];
    for (int b : p.op_buckets[i])
      at += p.bucket_bytes[b] * (p.first_grad_op[b] >= 0 && i >= p.first_grad_op[b] ? 2 : 1);
    need = std::max(need, at);
  }
  return need;
}

namespace detail {

BudgetShortfall shortfall(const OffloadProblem& p, int64_t needed, std::string needed_by, std::string placement) {
  BudgetShortfall s{.budget_bytes = p.budget_bytes,
                    .needed_bytes = needed,
                    .needed_by = std::move(needed_by),
                    .placement = std::move(placement),
                    .workspace_bytes = p.workspace_bytes,
                    .recomputed_blocks = p.checkpointed_layers,
                    .blocks = p.n_layers};
  s.suggest_checkpointing = p.checkpointed_layers < p.n_layers;
  return s;
}

}  // namespace detail

}  // namespace ferry::offload
