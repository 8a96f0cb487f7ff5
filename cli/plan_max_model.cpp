// `ferry plan --max-model`: the largest model of one width (the config's, or a named family's) that fits the device
// budget and the host memory, its layers bisected with a quick check of each size; then the plan `ferry plan` makes
// for the largest and for one layer more, which says where the limit lies.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cli/plan.h"
#include "cli/plan_target.h"
#include "engine/host_memory.h"
#include "engine/ops/host_cost_model.h"
#include "engine/step_planning.h"
#include "foundation/atomic_file.h"
#include "foundation/console.h"
#include "memory/host_buffer.h"
#include "models/registry.h"
#include "offload/policies.h"

namespace ferry::cli {
namespace {

// A width of a model family, as its Hugging Face config has it; every other key (vocabulary, positions, batch,
// tied embeddings) stays the experiment's.
struct NamedShape {
  const char* name;
  const char* kind;  // the model.kind it is a width of
  int n_embd, n_head;
  int kv_heads;  // num_key_value_heads; 0: every head its own (GPT-2, BERT)
  int mlp;       // intermediate_size
};
constexpr NamedShape kShapes[] = {
    {"gpt2-small", "gpt2", 768, 12, 0, 3072},   {"gpt2-medium", "gpt2", 1024, 16, 0, 4096},
    {"gpt2-large", "gpt2", 1280, 20, 0, 5120},  {"gpt2-xl", "gpt2", 1600, 25, 0, 6400},
    {"gpt-7b", "gpt2", 4096, 32, 0, 16384},     {"llama-1b", "llama", 2048, 32, 8, 8192},
    {"llama-3b", "llama", 3072, 24, 8, 8192},   {"llama-8b", "llama", 4096, 32, 8, 14336},
    {"llama-70b", "llama", 8192, 64, 8, 28672}, {"bert-base", "bert", 768, 12, 0, 3072},
    {"bert-large", "bert", 1024, 16, 0, 4096},
};

const NamedShape& named_shape(const std::string& name) {
  for (const NamedShape& s : kShapes)
    if (name == s.name) return s;
  std::string names;
  for (const NamedShape& s : kShapes) names += std::string(names.empty() ? "" : ", ") + s.name;
  throw std::runtime_error(fmt::format(
      "--max-model={}: not a shape; expected one of {}, or --max-model alone for the config's width", name, names));
}

// The search goes no deeper: a model this deep that still fits has no limit this search can find.
constexpr int kMostLayers = 4096;

// One size tried: whether the device budget and the host memory hold it, why not, and (planned in full) its plan.
struct Fit {
  int layers = 0;
  int64_t params = 0;
  std::string device_error;                        // empty: the budget holds it
  std::optional<engine::HostMemoryEstimate> host;  // unset: not estimated (the device check failed first)
  std::string host_error;                          // empty: the host memory holds it, or it was not estimated
  int64_t least_device_bytes = 0;                  // the quick check's: what any plan needs at least (when it fits)
  std::optional<offload::StepPlan> plan;           // the full check's, when the budget holds it
  offload::SimResult sim;
  double bound_s = 0;
  std::string cost_model;
  bool fits() const { return device_error.empty() && host && host_error.empty(); }
  // "device memory: ...; host memory: ..." (what does not fit)
  std::string why() const {
    std::string s = device_error.empty() ? "" : "device memory: " + device_error;
    if (!host_error.empty()) s += (s.empty() ? "" : "; ") + host_error;
    return s;
  }
};

class MaxModelSearch {
 public:
  MaxModelSearch(const engine::Config& cfg, const PlanOptions& opt)
      : cfg_(cfg), target_(plan_target(cfg)), available_(engine::available_host_memory()),
        budget_(engine::gpu_budget(opt.budget > 0 ? opt.budget : cfg.offload.gpu_budget, target_.device.kind)),
        policy_(offload::parse_policy(opt.policy.empty() ? cfg.offload.policy : opt.policy)) {
    // One cost model for every size: the rates, without a profile (the op times of one shape); the workspace
    // the profiled ops needed is every depth's (a block's ops are the same at every depth).
    // On the host device, its measured rates alone: profiling there takes a second or more, and its libraries'
    // scratch (the profile's workspace) is small, which the full plan of the largest size confirms.
    const engine::Config one = at(1);
    search_cost_ = target_.host_device && cfg.offload.cost_model.empty()
                       ? ops::host_cost_model(cfg.threads(), &cache_)
                       : plan_cost_model(one, engine::training_spec(one), target_, &cache_);
    search_cost_.profiled_op_s.clear();
  }

  // Whether `layers` fit, quickly: the policy's plan with every block checkpointed and without greedy's device
  // tier fits the budget exactly when some plan plan_step may choose does (more blocks checkpointed never need
  // more memory); its host memory is close to the full plan's, which confirm() checks.
  Fit quick(int layers) {
    const engine::Config c = at(layers);
    const models::ModelSpec spec = engine::training_spec(c);
    const offload::PlanRequest request = quick_request(c, spec);
    Fit f;
    f.layers = layers, f.params = spec.param_count();
    ++quick_checks_;
    try {
      const offload::StepPlan plan = offload::plan_step(spec, search_cost_, request);
      f.least_device_bytes = offload::minimum_device_bytes(plan.problem);
      check_host(f, spec, plan);
    } catch (const offload::BudgetError& e) {
      f.device_error = e.what();
    }
    return f;
  }

  // The plan `ferry plan --set model.n_layer=<layers>` makes, with its cost model. Where the budget does not hold
  // it, the host memory it would take anyway: planned at what resident needs, its arena (the host device's) at most
  // the budget.
  Fit full(int layers) {
    const engine::Config c = at(layers);
    const models::ModelSpec spec = engine::training_spec(c);
    const offload::CostModel cost = plan_cost_model(c, spec, target_, &cache_);
    offload::PlanRequest request = request_for(c, spec, cost);
    Fit f;
    f.layers = layers, f.params = spec.param_count();
    f.cost_model = cost.name + (cost.assumed ? " (assumed figures, not measured)" : "");
    ++full_plans_;
    try {
      f.plan = offload::plan_step(spec, cost, request);
      f.sim = offload::simulate(f.plan->problem, f.plan->schedule, f.plan->memory);
      f.bound_s = offload::lower_bound_step_s(spec, cost, request);
      check_host(f, spec, *f.plan);
    } catch (const offload::BudgetError& e) {
      f.device_error = e.what();
    }
    return f;
  }

  // Where the budget does not hold `f`, the host memory it would take anyway (so that a limit on both is seen):
  // planned at a budget that holds it, the host device's arena at most the budget.
  void estimate_host_anyway(Fit& f) const {
    const engine::Config c = at(f.layers);
    const models::ModelSpec spec = engine::training_spec(c);
    offload::PlanRequest request = quick_request(c, spec);
    const int64_t budget = request.budget_bytes;
    request.budget_bytes = int64_t(1) << 62;
    check_host(f, spec, offload::plan_step(spec, search_cost_, request), budget);
  }

  const engine::Config& config() const { return cfg_; }
  const PlanTarget& target() const { return target_; }
  const engine::DeviceBudget& budget() const { return budget_; }
  offload::Policy policy() const { return policy_; }
  int64_t available() const { return available_; }
  int quick_checks() const { return quick_checks_; }
  int full_plans() const { return full_plans_; }

 private:
  engine::Config at(int layers) const {
    engine::Config c = cfg_;
    c.model.n_layer = layers;
    return c;
  }
  // As print_plan asks: the config's request, the chosen policy, the budget given or else what resident needs.
  offload::PlanRequest request_for(const engine::Config& c, const models::ModelSpec& spec,
                                   const offload::CostModel& cost) const {
    offload::PlanRequest request = engine::plan_request(c, cost);
    request.policy = policy_;
    request.budget_bytes = budget_.bytes > 0 ? budget_.bytes : engine::resident_peak_bytes(spec, cost, request);
    return request;
  }
  // The quick check's request: every block checkpointed (where the config leaves it to the plan), no device tier.
  offload::PlanRequest quick_request(const engine::Config& c, const models::ModelSpec& spec) const {
    offload::PlanRequest request = request_for(c, spec, search_cost_);
    if (request.checkpointing == offload::Checkpointing::Auto) request.checkpointing = offload::Checkpointing::On;
    request.mixed_tiers = false;
    return request;
  }
  // The host memory `plan` takes (estimate_host_memory: what `ferry train` checks) against what is available;
  // `arena_at_most`: the host device's arena held to the budget the plan was not made at.
  void check_host(Fit& f, const models::ModelSpec& spec, const offload::StepPlan& plan,
                  int64_t arena_at_most = INT64_MAX) const {
    f.host = engine::estimate_host_memory(spec, plan, target_.host_device);
    f.host->device_arena = std::min(f.host->device_arena, arena_at_most);
    f.host_error = engine::host_memory_shortfall(*f.host, f.host->total(), available_);
  }

  engine::Config cfg_;
  PlanTarget target_;
  int64_t available_;
  engine::DeviceBudget budget_;
  offload::Policy policy_;
  offload::CostModel search_cost_;
  std::string cache_;
  int quick_checks_ = 0, full_plans_ = 0;
};

// The size at which what grows from `one` to `two` (one and two layers) by the same bytes every layer reaches `limit`.
int64_t where_it_runs_out(int64_t one, int64_t two, int64_t limit) {
  return two > one && limit >= 0 ? 2 + (limit - two) / (two - one) : kMostLayers;
}

// The most layers that pass the quick check (0: not even one), and the quick check of one layer more (unset when the
// search stopped at kMostLayers). From a guess: host memory and the least device memory grow by about the same
// bytes every layer, so the first guess is where the first of them runs out; then galloping from the guess until a size
// that fits and one that does not are known, and bisecting between them. The plan of a deep model takes seconds: a good
// guess saves most of them.
std::pair<int, std::optional<Fit>> most_layers_quickly(MaxModelSearch& search) {
  const Fit one = search.quick(1);
  if (!one.fits()) return {0, one};
  Fit two = search.quick(2);
  if (!two.fits()) return {1, std::move(two)};
  const int guess = static_cast<int>(
      std::clamp<int64_t>(std::min(where_it_runs_out(one.host->total(), two.host->total(), search.available()),
                                   where_it_runs_out(one.least_device_bytes, two.least_device_bytes,
                                                     search.budget().bytes > 0 ? search.budget().bytes : -1)),
                          2, kMostLayers));
  int lo = 2, hi = kMostLayers + 1;  // lo fits, hi does not
  std::optional<Fit> failed;         // hi's check
  auto check = [&](int n) {
    Fit f = search.quick(n);
    if (f.fits()) return lo = n, true;
    hi = n, failed = std::move(f);
    return false;
  };
  if (check(std::max(guess, 2))) {
    for (int step = 1; hi == kMostLayers + 1 && lo < kMostLayers; step *= 2) check(std::min(lo + step, kMostLayers));
  } else {
    for (int step = 1; lo == 2 && hi - step > 2; step *= 2) check(hi - step);
  }
  while (hi - lo > 1) check(lo + (hi - lo) / 2);
  return {lo, std::move(failed)};
}

// "gpt2, n_embd 4096, 32 heads (8 key/value), MLP 14336"
std::string describe_width(const models::ModelConfig& m) {
  return fmt::format("{}, n_embd {}, {} heads{}, MLP {}", m.kind, m.n_embd, m.n_head,
                     m.kv_heads() != m.n_head ? fmt::format(" ({} key/value)", m.kv_heads()) : "", m.mlp_width());
}

// "8.03B parameters", "2.4M parameters"
std::string parameters(int64_t n) {
  return n >= 1e9 ? fmt::format("{:.2f}B parameters", n / 1e9) : fmt::format("{:.1f}M parameters", n / 1e6);
}

const char* limit_of(const Fit& next) {
  if (!next.device_error.empty() && !next.host_error.empty()) return "both";
  return next.device_error.empty() ? "host memory" : "device memory";
}

void print_largest(const MaxModelSearch& search, const Fit& best, const std::optional<Fit>& next,
                   const std::string& train) {
  const offload::StepPlan& plan = *best.plan;
  console::print("largest: {} layers, {} ({})\n", best.layers, parameters(best.params),
                 describe_width(search.config().model));
  console::print("plan: {}; {} of {} blocks checkpointed\n", plan.schedule.label(), plan.problem.checkpointed_layers,
                 best.layers);
  console::print("predicted step: {:.4f} s (lower bound {:.4f} s); cost model: {}\n", best.sim.step_s, best.bound_s,
                 best.cost_model);
  console::print("device memory: peak {} of the {} budget\n", memory::format_bytes(best.sim.peak_device_bytes),
                 memory::format_bytes(plan.problem.budget_bytes));
  console::print("host memory: {} of {} available\n", best.host->describe(),
                 search.available() < 0 ? "unknown" : memory::format_bytes(search.available()));
  if (next) {
    console::print("one layer more ({} layers, {}) does not fit: {}\n", next->layers, parameters(next->params),
                   next->why());
    console::print("limit: {}\n", limit_of(*next));
  } else {
    console::print("limit: none below {} layers, where the search stops\n", kMostLayers);
  }
  console::print("train it: {} --set model.n_layer={}\n", train, best.layers);
}

nlohmann::json to_json(const MaxModelSearch& search, const Fit& best, const std::optional<Fit>& next) {
  const models::ModelConfig& m = search.config().model;
  nlohmann::json j{{"layers", best.layers},
                   {"params", best.params},
                   {"kind", m.kind},
                   {"n_embd", m.n_embd},
                   {"n_head", m.n_head},
                   {"kv_heads", m.kv_heads()},
                   {"intermediate_size", m.mlp_width()},
                   {"policy", offload::to_string(search.policy())},
                   {"budget_bytes", best.plan->problem.budget_bytes},
                   {"peak_device_bytes", best.sim.peak_device_bytes},
                   {"predicted_step_s", best.sim.step_s},
                   {"lower_bound_step_s", best.bound_s},
                   {"host_memory_bytes", best.host->total()},
                   {"host_memory_available_bytes", search.available()},
                   {"limit", next ? limit_of(*next) : "none"}};
  if (next) j["next"] = {{"layers", next->layers}, {"params", next->params}, {"error", next->why()}};
  return j;
}

}  // namespace

std::vector<std::string> max_model_shape_overrides(const std::string& name, const std::string& kind) {
  const NamedShape& s = named_shape(name);
  if (kind != s.kind)
    throw std::runtime_error(
        fmt::format("--max-model={}: a width of model.kind {}, and the config's model is a {}; take a {} config "
                    "(configs/ has one of each) or a {} shape",
                    name, s.kind, kind, s.kind, kind));
  std::vector<std::string> sets{fmt::format("model.n_embd={}", s.n_embd), fmt::format("model.n_head={}", s.n_head),
                                fmt::format("model.intermediate_size={}", s.mlp)};
  if (s.kv_heads > 0) sets.push_back(fmt::format("model.num_key_value_heads={}", s.kv_heads));
  return sets;
}

std::string max_model_help() {
  std::string help =
      "Instead of one plan: the largest model that fits the device budget and the host memory (measured, or "
      "FERRY_HOST_MEMORY_AVAILABLE) at the config's precision and optim.state, found by changing model.n_layer; prints "
      "its size, predicted step, device and host memory, what stops one layer more (device memory, host memory or "
      "both) and the ferry train command for it. Alone: the config's width (n_embd, heads, MLP). SHAPE: another "
      "width of the config's model.kind, vocabulary and the rest kept:";
  for (const NamedShape& s : kShapes)
    help += fmt::format("{} {} (width {}, {} heads{}, MLP {})", &s == kShapes ? "" : ";", s.name, s.n_embd, s.n_head,
                        s.kv_heads > 0 ? fmt::format(", {} key/value", s.kv_heads) : "", s.mlp);
  return help;
}

int print_max_model(const engine::Config& cfg, const PlanOptions& opt) {
  const auto start = std::chrono::steady_clock::now();
  MaxModelSearch search(cfg, opt);
  console::print(
      "ferry plan --max-model: {} grown in layers, batch {}x{}, {}, optim.state {}, policy {}, budget {}{}\n",
      describe_width(cfg.model), cfg.train.batch_size, cfg.sequence(), cfg.train.precision, cfg.optim.state,
      offload::to_string(search.policy()),
      search.budget().bytes > 0 ? memory::format_bytes(search.budget().bytes) : "what resident needs at each size",
      search.budget().note.empty() ? "" : " (" + search.budget().note + ")");
  console::print("device: {}\n", search.target().says);
  console::print("host memory available: {}\n",
                 search.available() < 0 ? "unknown (it limits nothing)" : memory::format_bytes(search.available()));

  auto [layers, next] = most_layers_quickly(search);
  // The plan ferry plan makes for it, with the predicted step: its host memory can differ a little from the quick
  // check's (greedy's device tier and delayed update change the host's buffers).
  Fit best = search.full(std::max(layers, 1));
  while (!best.fits() && best.layers > 1) next = std::move(best), best = search.full(next->layers - 1);
  if (next && !next->device_error.empty()) search.estimate_host_anyway(*next);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  console::print("search: {} sizes checked quickly (every block checkpointed), {} planned in full, {:.1f} s\n",
                 search.quick_checks(), search.full_plans(), seconds);
  if (!best.fits()) {
    if (!best.device_error.empty()) search.estimate_host_anyway(best);
    console::print(
        "fits: no: not even 1 layer fits: {}; with one layer, what is left to shrink is the width (--max-model=SHAPE), "
        "train.batch_size or model.seq_len\n",
        best.why());
    return 3;
  }
  print_largest(search, best, next, opt.train_command);
  if (!opt.json.empty())
    write_file_atomically(opt.json, nlohmann::json{{"max_model", to_json(search, best, next)}}.dump(2) + "\n",
                          "--json");
  return 0;
}

}  // namespace ferry::cli
