// ferry-bench planner: the pre-allocation Planner on GPT-2 step schedules and on random instances:
// peak / lower bound, planning time, and the peak a first-fit online allocator reaches replaying the
// same allocations in op order (what a caching allocator does at run time).
#include <fmt/format.h>

#include <array>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/bench_common.h"
#include "memory/planner.h"
#include "models/gpt2.h"
#include "foundation/rng.h"
#include "foundation/console.h"

namespace ferry::bench {
namespace {

using memory::TensorLifetime;

// First fit, online: at each op, free what died at the op before, then allocate what is born here, each
// into the lowest gap that holds it. Returns the highest address ever used.
int64_t first_fit_peak(const std::vector<TensorLifetime>& tensors) {
  int last_op = 0;
  for (const auto& t : tensors) last_op = std::max(last_op, t.last);
  std::vector<std::vector<int>> born(last_op + 1), dying(last_op + 1);
  for (int i = 0; i < static_cast<int>(tensors.size()); ++i) {
    if (tensors[i].bytes == 0) continue;
    born[tensors[i].first].push_back(i);
    dying[tensors[i].last].push_back(i);
  }
  std::map<int64_t, int64_t> used;  // offset -> end
  std::vector<int64_t> offset(tensors.size());
  int64_t peak = 0;
  for (int op = 0; op <= last_op; ++op) {
    for (int i : born[op]) {
      const auto& t = tensors[i];
      int64_t cursor = 0, at = -1;
      for (const auto& [begin, end] : used) {
        const int64_t start = (cursor + t.alignment - 1) & ~(t.alignment - 1);
        if (begin - start >= t.bytes) {
          at = start;
          break;
        }
        cursor = end;
      }
      if (at < 0) at = (cursor + t.alignment - 1) & ~(t.alignment - 1);
      used[at] = at + t.bytes;
      offset[i] = at;
      peak = std::max(peak, at + t.bytes);
    }
    for (int i : dying[op]) used.erase(offset[i]);
  }
  return peak;
}

// One training step of GPT-2 on a device that fetches each layer's bf16 weights before its first use and
// releases them after its last, in forward and again in backward, with a bf16 gradient staging buffer
// per layer during backward: the activations of the op list plus those weight slots and buffers. (A
// stand-in for the offload scheduler's schedules until it exists.)
std::vector<TensorLifetime> gpt2_step(const models::GptConfig& cfg, int64_t B, int64_t T) {
  const models::ModelSpec spec = models::build_gpt2(cfg, B, T);
  std::vector<TensorLifetime> out = spec.tensor_lifetimes();
  // Group parameters by layer ("transformer.h.N." or the embeddings / final norm), and find each group's
  // forward and backward use intervals.
  std::map<std::string, std::array<int, 4>> groups;  // fwd first, fwd last, bwd first, bwd last
  std::map<std::string, int64_t> group_bytes;
  auto group_of = [](const std::string& name) {
    const auto h = name.find(".h.");
    return h == std::string::npos ? name.substr(0, name.rfind('.')) : name.substr(0, name.find('.', h + 3));
  };
  for (const auto& p : spec.params) group_bytes[group_of(p.name)] += 2 * models::numel(p.shape);
  for (int i = 0; i < static_cast<int>(spec.ops.size()); ++i) {
    for (int p : spec.ops[i].params) {
      auto [it, fresh] = groups.try_emplace(group_of(spec.params[p].name), std::array<int, 4>{-1, -1, -1, -1});
      auto& g = it->second;
      const int k = spec.ops[i].pass == models::Pass::Forward ? 0 : 2;
      if (g[k] < 0) g[k] = i;
      g[k + 1] = i;
    }
  }
  for (const auto& [name, g] : groups) {
    const int64_t bytes = group_bytes[name];
    out.push_back({bytes, 256, g[0], g[1]});  // weights, forward
    out.push_back({bytes, 256, g[2], g[3]});  // weights, backward
    out.push_back({bytes, 256, g[2], g[3]});  // gradient staging
  }
  return out;
}

std::vector<TensorLifetime> random_tensors(int n, uint64_t seed) {
  Rng rng(seed);
  const int ops = n / 4;
  std::vector<TensorLifetime> t(n);
  for (auto& x : t) {
    x.bytes = static_cast<int64_t>(256 * (1 + rng.below(rng.below(8) == 0 ? 1 << 16 : 1 << 10)));
    x.first = static_cast<int>(rng.below(ops));
    x.last = std::min(ops - 1, x.first + static_cast<int>(rng.below(rng.below(4) == 0 ? ops / 2 : 16)));
  }
  return t;
}

}  // namespace

int run_planner_bench(const std::string& json_path, const std::string& markdown_path, const std::string& command) {
  struct Case {
    std::string name;
    std::vector<TensorLifetime> tensors;
  };
  std::vector<Case> cases;
  cases.push_back({"gpt2-124m step (B=4, T=1024)", gpt2_step({12, 12, 768, 50257, 1024}, 4, 1024)});
  cases.push_back({"gpt2-350m step (B=4, T=1024)", gpt2_step({24, 16, 1024, 50257, 1024}, 4, 1024)});
  cases.push_back({"gpt2-1.5b step (B=4, T=1024)", gpt2_step({48, 25, 1600, 50257, 1024}, 4, 1024)});
  cases.push_back({"random 1k", random_tensors(1000, 1)});
  cases.push_back({"random 10k", random_tensors(10000, 2)});

  nlohmann::json results = nlohmann::json::array();
  std::ostringstream table;
  table << "| case | tensors | peak | lower bound | peak / bound | plan ms | first-fit peak | first-fit / bound |\n"
        << "|---|---|---|---|---|---|---|---|\n";
  auto gib = [](int64_t b) { return fmt::format("{:.3f} GiB", b / double(1 << 30)); };
  for (const auto& c : cases) {
    std::vector<double> times;
    memory::ArenaLayout plan;
    for (int r = 0; r < 5; ++r) {
      const auto t0 = Clock::now();
      plan = memory::Planner::plan(c.tensors);
      times.push_back(seconds_since(t0));
    }
    const std::string problem = memory::Planner::check(c.tensors, plan);
    if (!problem.empty()) throw std::logic_error(c.name + ": invalid plan: " + problem);
    const int64_t ff = first_fit_peak(c.tensors);
    const double ratio = double(plan.peak) / double(plan.lower_bound);
    results.push_back({{"name", c.name}, {"tensors", c.tensors.size()}, {"peak_bytes", plan.peak},
                       {"lower_bound_bytes", plan.lower_bound}, {"ratio", ratio}, {"plan_ms", median(times) * 1e3},
                       {"first_fit_peak_bytes", ff}});
    table << fmt::format("| {} | {} | {} | {} | {:.4f} | {:.1f} | {} | {:.3f} |\n", c.name, c.tensors.size(),
                         gib(plan.peak), gib(plan.lower_bound), ratio, median(times) * 1e3, gib(ff),
                         double(ff) / double(plan.lower_bound));
  }
  console::print("{}", table.str());
  if (!json_path.empty()) {
    nlohmann::json j{{"benchmark", "planner"}, {"cases", results}, {"machine", {{"cpu", cpu_model()}}},
                     {"date", today()}, {"command", command}};
    write_result(json_path, "--json", j.dump(2) + "\n");
  }
  if (!markdown_path.empty()) {
    write_result(markdown_path, "--markdown",
                 fmt::format("# Pre-allocation planner\n\nMachine: {}, one thread. Date: {}.\n\nCommand: `{}`\n\n"
                             "Plan time: median of 5. GPT-2 cases: the activations of one training step plus, per "
                             "layer, bf16 weight slots for forward and for backward and a bf16 gradient staging "
                             "buffer, each alive from its first to its last use.\n\n",
                             cpu_model(), today(), command) +
                     table.str());
  }
  return 0;
}

}  // namespace ferry::bench
