// ferry-bench policies: every placement policy on a cost model (the shipped H100-class one by default) over
// the workloads users run: GPT-2 350M to 7B, Llama 3.2 1B and 3B, Llama 3.1 8B and BERT-large, 4K to 64K tokens per
// step (micro-batches and accumulation), budgets of 8 to 80 GiB. Predicted step times beside the lower bound no plan
// can beat, the ratios between the policies, and where greedy puts the weights (its tiers).
#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/bench_common.h"
#include "engine/parallel_planning.h"
#include "memory/bucket_layout.h"
#include "models/bert.h"
#include "models/gpt2.h"
#include "models/llama.h"
#include "offload/policies.h"
#include "foundation/console.h"

namespace ferry::bench {
namespace {

struct Shape {
  std::string name;
  models::ModelSpec (*build)(int64_t batch, int64_t seq);
  int64_t max_batch, seq;  // the largest micro-batch: more tokens per step accumulate micro-batches of it
};

models::ModelSpec gpt(int n_layer, int n_head, int n_embd, int64_t batch, int64_t seq) {
  models::GptConfig c;
  c.n_layer = n_layer, c.n_head = n_head, c.n_embd = n_embd, c.vocab_size = 50257, c.seq_len = 1024;
  return models::build_gpt2(c, batch, seq);
}

// A Llama 3 shape (their config.json's): 128256 tokens, rope_theta 500000 with Llama 3's rope_scaling.
models::ModelSpec llama(int n_layer, int n_head, int n_embd, int ffn, bool tied, int64_t batch, int64_t seq) {
  models::LlamaConfig c{n_layer, n_head, 8, n_embd, 128256, 131072, ffn};
  c.eps = 1e-5f, c.tied = tied, c.rope = {500000.0f, tied ? 32.0f : 8.0f, 1.0f, 4.0f, 8192.0f};
  return models::build_llama(c, batch, seq);
}

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> all{
      {"gpt2-350m", [](int64_t b, int64_t t) { return gpt(24, 16, 1024, b, t); }, 16, 1024},
      {"gpt2-774m", [](int64_t b, int64_t t) { return gpt(36, 20, 1280, b, t); }, 16, 1024},
      {"gpt2-1.5b", [](int64_t b, int64_t t) { return gpt(48, 25, 1600, b, t); }, 16, 1024},
      {"gpt-3b", [](int64_t b, int64_t t) { return gpt(32, 32, 2560, b, t); }, 16, 1024},
      {"gpt-7b", [](int64_t b, int64_t t) { return gpt(32, 32, 4096, b, t); }, 16, 1024},
      {"llama-3.2-1b", [](int64_t b, int64_t t) { return llama(16, 32, 2048, 8192, true, b, t); }, 16, 1024},
      {"llama-3.2-3b", [](int64_t b, int64_t t) { return llama(28, 24, 3072, 8192, true, b, t); }, 16, 1024},
      {"llama-3.1-8b", [](int64_t b, int64_t t) { return llama(32, 32, 4096, 14336, false, b, t); }, 16, 1024},
      {"bert-large",
       [](int64_t b, int64_t t) {
         models::BertConfig c;
         c.n_layer = 24, c.n_head = 16, c.n_embd = 1024, c.vocab_size = 30522, c.seq_len = 512;
         return models::build_bert(c, b, t);
       },
       32, 512}};
  return all;
}

// Weight bytes the plan keeps in each tier.
nlohmann::json tier_bytes(const offload::StepPlan& plan) {
  const offload::TierTotals t = offload::tier_totals(plan.problem, plan.schedule);
  return {{"device", t.bytes[0]}, {"weights_resident", t.bytes[1]}, {"streamed", t.bytes[2]}};
}

struct Row {
  nlohmann::json cases = nlohmann::json::array();
  std::string markdown;
};

// The overlap a policy runs with in the benchmark: the one asked for where the policy allows it, except
// pipelined, which only greedy takes: zero-offload and chunk-lru stand for DeepSpeed's and Gemini's step.
offload::Overlap policy_overlap(const PoliciesBenchOptions& o, offload::Policy policy) {
  const offload::Overlap asked = offload::parse_overlap(o.overlap);
  if (asked == offload::Overlap::Pipelined && policy != offload::Policy::Greedy) return offload::Overlap::Backward;
  return offload::overlap_allowed(policy, asked) ? asked : offload::Overlap::Backward;
}

// One model, workload and budget: every policy, planned as `ferry train` would (checkpointing auto).
Row run_row(const PoliciesBenchOptions& o, const offload::CostModel& cost, const Shape& shape, const models::ModelSpec& spec,
            int64_t batch, int accum, int gib) {
  offload::PlanRequest request;
  request.parallel = engine::parallel_planning();  // as `ferry train` plans: on every core
  request.budget_bytes = int64_t(gib) << 30;
  request.checkpointing = offload::Checkpointing::Auto;
  request.grad_accum = accum;
  request.mixed_tiers = o.mixed_tiers;
  offload::PlanRequest bound_request = request;
  bound_request.overlap = offload::parse_overlap(o.overlap);
  const double bound = offload::lower_bound_step_s(spec, cost, bound_request);
  const int64_t tokens = batch * shape.seq * accum;
  Row row;
  row.markdown = fmt::format("| {} | {:.2f}B | {}K ({}x{}x{}) | {} GiB | {:.3f} |", shape.name, spec.param_count() / 1e9, tokens / 1024,
                             batch, shape.seq, accum, gib, bound);
  std::map<offload::Policy, double> step;
  std::string tiers = "-";
  for (offload::Policy policy : offload::all_policies()) {
    const auto t0 = Clock::now();
    nlohmann::json c{{"model", shape.name}, {"params", spec.param_count()}, {"tokens_per_step", tokens}, {"micro_batch", batch},
                     {"seq", shape.seq}, {"grad_accum", accum}, {"budget_bytes", request.budget_bytes},
                     {"policy", offload::to_string(policy)}, {"lower_bound_step_s", bound}};
    request.policy = policy;
    request.overlap = policy_overlap(o, policy);
    try {
      const offload::StepPlan plan = offload::plan_step(spec, cost, request);
      const offload::SimResult r = offload::simulate(plan.problem, plan.schedule, plan.memory);
      // The overlap as planned: greedy may update every bucket in the step where that is faster.
      const char* ran = plan.schedule.delayed_update ? "delayed" : plan.schedule.pipelined_update ? "pipelined" : "backward";
      c.update({{"overlap", ran}, {"construction", plan.schedule.construction}, {"fits", true},
                {"checkpointed_blocks", plan.problem.checkpointed_layers}, {"predicted_step_s", r.step_s},
                {"peak_device_bytes", r.peak_device_bytes}, {"h2d_bytes", r.h2d_bytes}, {"d2h_bytes", r.d2h_bytes},
                {"stall_s", r.stall_s}, {"cpu_busy_s", r.cpu_busy_s}, {"tier_weight_bytes", tier_bytes(plan)}});
      row.markdown += plan.problem.checkpointed_layers ? fmt::format(" {:.3f} ({} ckpt) |", r.step_s, plan.problem.checkpointed_layers)
                                                       : fmt::format(" {:.3f} |", r.step_s);
      step[policy] = r.step_s;
      if (policy == offload::Policy::Greedy) {
        const nlohmann::json& t = c["tier_weight_bytes"];
        tiers = fmt::format("{:.1f} / {:.1f} / {:.1f}", t["device"].get<double>() / (1 << 30), t["weights_resident"].get<double>() / (1 << 30),
                            t["streamed"].get<double>() / (1 << 30));
      }
    } catch (const offload::BudgetError&) {
      c["fits"] = false;
      row.markdown += " does not fit |";
    }
    c["plan_s"] = seconds_since(t0);
    row.cases.push_back(c);
  }
  auto ratio = [&](offload::Policy num, offload::Policy den) {
    return step.count(num) && step.count(den) ? fmt::format(" {:.2f} |", step[num] / step[den]) : std::string(" - |");
  };
  const double greedy = step.count(offload::Policy::Greedy) ? step[offload::Policy::Greedy] : 0;
  row.markdown += greedy > 0 ? fmt::format(" {:.3f} |", greedy / bound) : std::string(" - |");
  row.markdown += ratio(offload::Policy::ZeroOffload, offload::Policy::Greedy) + ratio(offload::Policy::ChunkLru, offload::Policy::Greedy);
  row.markdown += " " + tiers + " |";
  return row;
}

std::string overlap_text(const std::string& overlap) {
  if (overlap == "delayed") return "delayed (the CPU's AdamW one step behind; the device tier, and resident, update on the device in the step)";
  if (overlap == "pipelined")
    return "pipelined for greedy (its CPU AdamW runs on into the next step's forward, which waits for each bucket's new weights: "
           "exact; the step is the steady-state period; the lower bound is pipelined's); resident, zero-offload and chunk-lru "
           "backward, as their systems run them (DeepSpeed and Gemini finish the update before the next forward)";
  return "backward";
}

template <class T>
bool selected(const std::vector<T>& chosen, const T& value) {
  return chosen.empty() || std::find(chosen.begin(), chosen.end(), value) != chosen.end();
}

}  // namespace

int run_policies_bench(const PoliciesBenchOptions& o) {
  const offload::CostModel cost = offload::CostModel::load(o.cost_model);
  nlohmann::json cases = nlohmann::json::array();
  std::ostringstream table;
  table << "| model | params | tokens/step (micro-batch x seq x accumulation) | budget | lower bound s | resident | zero-offload | "
           "chunk-lru | greedy | greedy / bound | zero-offload / greedy | chunk-lru / greedy | greedy's weights, GiB: device / "
           "resident / streamed |\n"
        << "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Shape& shape : shapes()) {
    if (!selected(o.models, shape.name)) continue;
    for (int64_t tokens : o.tokens) {
      const int64_t sequences = std::max<int64_t>(1, tokens / shape.seq);
      const int64_t batch = std::min(sequences, shape.max_batch);
      const int accum = static_cast<int>(std::max<int64_t>(1, sequences / batch));
      models::ModelSpec spec = shape.build(batch, shape.seq);
      spec.set_precision(DType::BF16);  // train.precision's default: what the GPU stores
      for (int gib : o.budgets_gib) {
        Row row = run_row(o, cost, shape, spec, batch, accum, gib);
        for (auto& c : row.cases) cases.push_back(std::move(c));
        table << row.markdown << "\n";
        console::print(stderr, "{}\n", row.markdown);
      }
    }
  }
  console::print("{}", table.str());
  if (!o.json.empty()) {
    nlohmann::json j{{"benchmark", "policies"}, {"cost_model", cost.to_json()}, {"overlap", o.overlap},
                     {"mixed_tiers", o.mixed_tiers}, {"cases", cases}, {"date", today()}, {"command", o.command}};
    write_result(o.json, "--json", j.dump(2) + "\n");
  }
  if (!o.markdown.empty()) {
    write_result(o.markdown, "--markdown",
                 fmt::format("# Placement policies on the simulator\n\nCost model: {} ({}). bf16; buckets of 32 MiB; activation "
                             "checkpointing auto (\"k ckpt\": k blocks recomputed); overlap {}; greedy {}. Predicted step times in "
                             "seconds; the lower bound holds for every placement and checkpointing plan_step may choose. Date: {}."
                             "\n\nCommand: `{}`\n\n",
                             cost.name, cost.assumed ? "assumed figures, not measured" : "measured",
                             overlap_text(o.overlap),
                             o.mixed_tiers ? "with the device tier (AdamW on the GPU for some buckets, the CPU's for the rest)"
                                           : "without the device tier",
                             today(), o.command) +
                     table.str());
  }
  return 0;
}

}  // namespace ferry::bench
