// ferry-bench policies: every placement policy on the shipped H100-class cost model, for GPT shapes from
// 350M to 7B parameters at 4, 8 and 16 GiB of device memory: the predicted step time of each policy beside
// the lower bound no plan can beat.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/bench_common.h"
#include "memory/bucket_layout.h"
#include "models/gpt2.h"
#include "offload/policies.h"

namespace ferry::bench {

int run_policies_bench(const std::string& cost_model_path, int64_t batch, int64_t seq, bool delayed,
                       const std::string& json_path, const std::string& markdown_path, const std::string& command) {
  const offload::CostModel cost = offload::CostModel::load(cost_model_path);
  struct Model {
    std::string name;
    models::GptConfig cfg;
  };
  const std::vector<Model> shapes{{"gpt2-350m", {24, 16, 1024, 50257, 1024}},
                                  {"gpt2-774m", {36, 20, 1280, 50257, 1024}},
                                  {"gpt2-1.5b", {48, 25, 1600, 50257, 1024}},
                                  {"gpt-3b", {32, 32, 2560, 50257, 1024}},
                                  {"gpt-7b", {32, 32, 4096, 50257, 1024}}};
  nlohmann::json cases = nlohmann::json::array();
  std::ostringstream table;
  table << "| model | params | budget | lower bound s | resident | zero-offload | chunk-lru | greedy | greedy / bound |\n"
        << "|---|---|---|---|---|---|---|---|---|\n";
  for (const Model& m : shapes) {
    models::ModelSpec spec = models::build_gpt2(m.cfg, batch, seq);
    spec.set_precision(DType::BF16);  // train.precision's default: what the GPU stores
    for (int gib : {4, 8, 16}) {
      const offload::OffloadProblem p(spec, cost, memory::BucketLayout::kDefaultBucketBytes, int64_t(gib) << 30);
      const double bound = offload::lower_bound_step_s(p);
      std::string row = fmt::format("| {} | {:.2f}B | {} GiB | {:.3f} |", m.name, spec.param_count() / 1e9, gib, bound);
      double greedy_s = 0;
      for (offload::Policy policy : offload::all_policies()) {
        const auto t0 = Clock::now();
        nlohmann::json c{{"model", m.name}, {"params", spec.param_count()}, {"budget_bytes", p.budget_bytes},
                         {"policy", offload::to_string(policy)}, {"lower_bound_step_s", bound}};
        try {
          offload::PlanRequest request;
          request.budget_bytes = p.budget_bytes;
          request.policy = policy;
          request.checkpointing = offload::Checkpointing::Auto;
          if (delayed && offload::overlap_allowed(policy, offload::Overlap::Delayed)) request.overlap = offload::Overlap::Delayed;
          const offload::StepPlan plan = offload::plan_step(spec, cost, request);
          const offload::SimResult r = offload::simulate(plan.problem, plan.schedule, plan.memory);
          c["overlap"] = offload::to_string(request.overlap);
          c["construction"] = plan.schedule.construction;
          c["fits"] = true;
          c["checkpointed_blocks"] = plan.problem.checkpointed_layers;
          c["predicted_step_s"] = r.step_s;
          c["peak_device_bytes"] = r.peak_device_bytes;
          c["h2d_bytes"] = r.h2d_bytes;
          c["d2h_bytes"] = r.d2h_bytes;
          c["stall_s"] = r.stall_s;
          row += plan.problem.checkpointed_layers
                     ? fmt::format(" {:.3f} ({} ckpt) |", r.step_s, plan.problem.checkpointed_layers)
                     : fmt::format(" {:.3f} |", r.step_s);
          if (policy == offload::Policy::Greedy) greedy_s = r.step_s;
        } catch (const offload::BudgetError&) {
          c["fits"] = false;
          row += " does not fit |";
        }
        c["plan_s"] = seconds_since(t0);
        cases.push_back(c);
      }
      row += greedy_s > 0 ? fmt::format(" {:.3f} |", greedy_s / bound) : " - |";
      table << row << "\n";
      fmt::print(stderr, "{}\n", row);
    }
  }
  fmt::print("{}", table.str());
  if (!json_path.empty()) {
    nlohmann::json j{{"benchmark", "policies"}, {"cost_model", cost.to_json()}, {"batch", batch}, {"seq", seq},
                     {"overlap", delayed ? "delayed" : "backward"},
                     {"cases", cases}, {"date", today()}, {"command", command}};
    write_result(json_path, "--json", j.dump(2) + "\n");
  }
  if (!markdown_path.empty()) {
    write_result(markdown_path, "--markdown",
                 fmt::format("# Placement policies on the simulator\n\nCost model: {} ({}). Batch {} x {} tokens; "
                             "buckets of 32 MiB; activation checkpointing auto (\"k ckpt\": k blocks recomputed); overlap {}{}. "
                             "Predicted step times in seconds. Date: {}.\n\nCommand: `{}`\n\n",
                             cost.name, cost.assumed ? "assumed figures, not measured" : "measured", batch, seq,
                             delayed ? "delayed (AdamW one step behind)" : "backward",
                             delayed ? ", except resident, which runs AdamW on the device (overlap backward)" : "",
                             today(), command) +
                     table.str());
  }
  return 0;
}

}  // namespace ferry::bench
