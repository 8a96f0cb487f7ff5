// Parameter groups (optim.groups): the pattern syntax and its errors, the config keys, AdamW's per-range
// hyper-parameters, frozen parameters in the planner (no gradient buffers, copies or updates) and in the
// Executor (never changed, no moments, fewer bytes to the host), with every policy still bitwise alike.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cpu_optim/adamw.h"
#include "dataset/dataset.h"
#include "engine/config.h"
#include "engine/device/host_device.h"
#include "engine/executor.h"
#include "engine/group_settings.h"
#include "engine/param_groups.h"
#include "engine/step_planning.h"
#include "engine/trainer.h"
#include "memory/host_buckets.h"
#include "memory/pinned_pool.h"
#include "models/parameter_store.h"
#include "models/registry.h"
#include "offload/policies.h"
#include "offload/simulator.h"
#include "test_helpers.h"

namespace ferry::engine {
namespace {

using Region = memory::HostBuckets::Region;

const auto kText = testing::source_path("configs/data/fortunes.txt");
const auto kCostModel = testing::source_path("configs/cost_models/h100-assumed.json");

// The message of the std::invalid_argument `f` throws; "" when it throws none.
std::string invalid_argument_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// ---------------------------------------------------------------------------------------------- patterns

TEST(ParamGroupPattern, GlobsMatchWholeNames) {
  EXPECT_TRUE(pattern_matches("*.bias", "transformer.h.0.attn.c_attn.bias"));
  EXPECT_FALSE(pattern_matches("*.bias", "transformer.h.0.attn.c_attn.weight"));
  EXPECT_TRUE(pattern_matches("transformer.h.[0-5].*", "transformer.h.3.mlp.c_fc.weight"));
  EXPECT_FALSE(pattern_matches("transformer.h.[0-5].*", "transformer.h.11.mlp.c_fc.weight"));  // one character, then '.'
  EXPECT_FALSE(pattern_matches("transformer.h.[0-5].*", "transformer.h.6.mlp.c_fc.weight"));
  EXPECT_TRUE(pattern_matches("transformer.h.[!0-5].*", "transformer.h.6.mlp.c_fc.weight"));
  EXPECT_TRUE(pattern_matches("transformer.h.1[01].*", "transformer.h.11.ln_1.bias"));
  EXPECT_TRUE(pattern_matches("*LayerNorm*", "bert.encoder.layer.0.output.LayerNorm.weight"));
  EXPECT_TRUE(pattern_matches("transformer.h.?.ln_1.weight", "transformer.h.7.ln_1.weight"));
  EXPECT_FALSE(pattern_matches("transformer.wte", "transformer.wte.weight"));  // whole names: no prefix match
  EXPECT_FALSE(pattern_matches("wte.weight", "transformer.wte.weight"));
  EXPECT_TRUE(pattern_matches("cls.* | *.bias", "bert.pooler.dense.bias"));  // alternatives, spaces trimmed
  EXPECT_TRUE(pattern_matches("cls.* | *.bias", "cls.predictions.bias"));
  EXPECT_TRUE(pattern_matches("*", "anything.at.all"));
  EXPECT_TRUE(pattern_matches("a*b*c", "a.x.b.y.c"));
  EXPECT_FALSE(pattern_matches("a*b*c", "a.x.b.y.d"));
}

TEST(ParamGroupPattern, BadSyntaxIsNamed) {
  EXPECT_NE(invalid_argument_of([] { check_pattern("transformer.h.[0-5.*"); }).find("never closed"), std::string::npos);
  EXPECT_NE(invalid_argument_of([] { check_pattern("*.bias||*ln*"); }).find("empty alternative"), std::string::npos);
  EXPECT_EQ(invalid_argument_of([] { check_pattern("*.bias|*ln_*|transformer.h.[0-5].*"); }), "");
}

const std::vector<std::string> kNames{"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight",
                                      "transformer.h.0.ln_1.bias", "transformer.h.0.attn.c_attn.weight", "transformer.h.1.ln_1.weight",
                                      "transformer.ln_f.weight"};

TEST(ParamGroupResolution, FirstMatchWinsAndTheRestKeepTheDefaults) {
  std::vector<ParamGroup> groups(2);
  groups[0].params = "*.bias|*ln_*", groups[0].weight_decay = 0.0;
  groups[1].params = "transformer.h.0.*", groups[1].frozen = true;
  const std::vector<ParamSettings> s = resolve_param_groups(groups, kNames, 0.1);
  ASSERT_EQ(s.size(), kNames.size());
  EXPECT_EQ(s[0].group, -1);
  EXPECT_EQ(s[0].weight_decay, 0.1);
  EXPECT_EQ(s[0].lr_scale, 1.0);
  EXPECT_FALSE(s[0].frozen);
  EXPECT_EQ(s[2].group, 0);  // h.0's LayerNorm: the first group's, not frozen
  EXPECT_FALSE(s[2].frozen);
  EXPECT_EQ(s[2].weight_decay, 0.0);
  EXPECT_EQ(s[4].group, 1);
  EXPECT_TRUE(s[4].frozen);
  EXPECT_EQ(s[6].weight_decay, 0.0);  // ln_f
}

TEST(ParamGroupResolution, AGroupThatMatchesNothingNamesItsPatternAndRealNames) {
  std::vector<ParamGroup> groups(1);
  groups[0].params = "bert.encoder.layer.[0-5].*", groups[0].frozen = true;
  const std::string e = invalid_argument_of([&] { resolve_param_groups(groups, kNames, 0.1); });
  EXPECT_NE(e.find("optim.groups[0].params: 'bert.encoder.layer.[0-5].*' matches no parameter"), std::string::npos) << e;
  EXPECT_NE(e.find("transformer.wte.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("7 parameters"), std::string::npos) << e;
}

TEST(ParamGroupResolution, AGroupShadowedByEarlierOnesOrFreezingEverythingIsAnError) {
  std::vector<ParamGroup> groups(2);
  groups[0].params = "transformer.h.*", groups[0].lr_scale = 2.0;
  groups[1].params = "transformer.h.0.*", groups[1].frozen = true;
  const std::string e = invalid_argument_of([&] { resolve_param_groups(groups, kNames, 0.1); });
  EXPECT_NE(e.find("optim.groups[1].params"), std::string::npos) << e;
  EXPECT_NE(e.find("optim.groups[0]"), std::string::npos) << e;
  std::vector<ParamGroup> all(1);
  all[0].params = "*", all[0].frozen = true;
  EXPECT_NE(invalid_argument_of([&] { resolve_param_groups(all, kNames, 0.1); }).find("every parameter is frozen"), std::string::npos);
}

// ------------------------------------------------------------------------------------------------ config

std::string config_yaml(const std::string& optim) {
  return "model: {n_layer: 2, n_head: 2, n_embd: 64, seq_len: 16}\n"
         "data: {path: " + kText.string() + "}\n"
         "optim: " + optim + "\n";
}

std::string config_error(const std::string& optim) {
  return testing::error_of([&] { parse_config(config_yaml(optim), "groups.yaml", "."); });
}

TEST(ParamGroupConfig, ReadsTheGroupsList) {
  const Config c = parse_config(config_yaml("{lr: 1.0e-3, groups: [{params: \"*.bias|*ln_*\", weight_decay: 0},"
                                            " {params: \"transformer.h.0.*\", frozen: true}, {params: \"transformer.h.1.*\", lr_scale: 10}]}"),
                                "groups.yaml", ".");
  ASSERT_EQ(c.optim.groups.size(), 3u);
  EXPECT_EQ(c.optim.groups[0].params, "*.bias|*ln_*");
  EXPECT_EQ(c.optim.groups[0].weight_decay, 0.0);
  EXPECT_FALSE(c.optim.groups[0].lr_scale.has_value());
  EXPECT_TRUE(c.optim.groups[1].frozen);
  EXPECT_EQ(c.optim.groups[2].lr_scale, 10.0);
}

TEST(ParamGroupConfig, MistakesNameTheKey) {
  EXPECT_NE(config_error("{groups: [{params: \"*.bias\", decay: 0}]}").find("optim.groups[0].decay: unknown key"), std::string::npos);
  EXPECT_NE(config_error("{groups: [{weight_decay: 0}]}").find("optim.groups[0]: expected a mapping with a params pattern"), std::string::npos);
  EXPECT_NE(config_error("{groups: [{params: \"a\", frozen: true, lr_scale: 2}]}").find("a frozen group is never updated"), std::string::npos);
  EXPECT_NE(config_error("{groups: [{params: \"a\", lr_scale: -1}]}").find("optim.groups[0].lr_scale"), std::string::npos);
  EXPECT_NE(config_error("{groups: [{params: \"a\", frozen: maybe}]}").find("optim.groups[0].frozen"), std::string::npos);
  EXPECT_NE(config_error("{groups: [{params: \"h.[0-5\"}]}").find("never closed"), std::string::npos);
  EXPECT_NE(config_error("{groups: {params: \"a\"}}").find("optim.groups: expected a list"), std::string::npos);
}

TEST(ParamGroupConfig, GroupsEnterTheIdentityOnlyWhenGiven) {
  const Config plain = parse_config(config_yaml("{lr: 1.0e-3}"), "a.yaml", ".");
  const Config none = parse_config(config_yaml("{lr: 1.0e-3, groups: []}"), "a.yaml", ".");
  const Config grouped = parse_config(config_yaml("{lr: 1.0e-3, groups: [{params: \"*.bias\", weight_decay: 0}]}"), "a.yaml", ".");
  const Config other = parse_config(config_yaml("{lr: 1.0e-3, groups: [{params: \"*.bias\", weight_decay: 0.01}]}"), "a.yaml", ".");
  EXPECT_EQ(config_identity(plain).size(), config_identity(none).size());
  EXPECT_EQ(config_hash(plain), config_hash(none));  // earlier checkpoints keep their hash
  EXPECT_NE(config_hash(plain), config_hash(grouped));
  EXPECT_NE(config_hash(grouped), config_hash(other));
  EXPECT_EQ(config_identity(grouped).back().first, "optim.groups");
}

// ------------------------------------------------------------------------------------- AdamW's ranges

struct AdamWData {
  explicit AdamWData(size_t n) : p(n), m(n), v(n), g(n), up(n) {
    std::mt19937 rng(5);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (size_t i = 0; i < n; ++i) p[i] = d(rng), m[i] = 0.1f * d(rng), v[i] = std::abs(0.01f * d(rng)), g[i] = d(rng);
  }
  cpu_optim::Bucket bucket(std::span<const cpu_optim::HyperRange> ranges = {}) {
    return {p, m, v, g.data(), DType::F32, up.data(), DType::BF16, ranges};
  }
  std::vector<float> p, m, v, g;
  std::vector<uint16_t> up;
};

TEST(AdamWRanges, SplittingChangesNoBitAndEachRangeIsAdamWWithItsOwnSettings) {
  const size_t n = 3 * 4096 + 17;
  cpu_optim::AdamWOptions options;
  options.hyper.weight_decay = 0.1;
  const cpu_optim::CpuAdamW adamw(options);
  AdamWData whole(n), split(n), grouped(n);
  const std::vector<cpu_optim::HyperRange> same{{0, 256, 1.0, 0.1}, {256, 8192, 1.0, 0.1}, {8192, n, 1.0, 0.1}};
  for (int step = 1; step <= 3; ++step) {
    adamw.step(whole.bucket(), step, 1e-3, 0.5f);
    adamw.step(split.bucket(same), step, 1e-3, 0.5f);
  }
  EXPECT_EQ(whole.p, split.p);
  EXPECT_EQ(whole.m, split.m);
  EXPECT_EQ(whole.up, split.up);
  // [0, 256) without weight decay, [256, 8192) at ten times the lr: the same as AdamWs of those settings.
  const std::vector<cpu_optim::HyperRange> own{{0, 256, 1.0, 0.0}, {256, 8192, 10.0, 0.1}, {8192, n, 1.0, 0.1}};
  cpu_optim::AdamWOptions no_decay = options;
  no_decay.hyper.weight_decay = 0;
  AdamWData a(n), b(n);
  adamw.step(grouped.bucket(own), 1, 1e-3, 1.0f);
  cpu_optim::CpuAdamW(no_decay).step(a.bucket(), 1, 1e-3, 1.0f);
  adamw.step(b.bucket(), 1, 1e-3 * 10.0, 1.0f);
  AdamWData plain(n);
  adamw.step(plain.bucket(), 1, 1e-3, 1.0f);
  EXPECT_TRUE(std::equal(grouped.p.begin(), grouped.p.begin() + 256, a.p.begin()));
  EXPECT_FALSE(std::equal(grouped.p.begin(), grouped.p.begin() + 256, plain.p.begin()));
  EXPECT_TRUE(std::equal(grouped.p.begin() + 256, grouped.p.begin() + 8192, b.p.begin() + 256));
  EXPECT_TRUE(std::equal(grouped.p.begin() + 8192, grouped.p.end(), plain.p.begin() + 8192));
}

TEST(AdamWRanges, RangesMustCoverTheBucketInOrder) {
  const cpu_optim::CpuAdamW adamw(cpu_optim::AdamWOptions{});
  AdamWData d(1000);
  const std::vector<cpu_optim::HyperRange> gap{{0, 100, 1, 0}, {200, 1000, 1, 0}}, short_{{0, 999, 1, 0}}, negative{{0, 1000, -1, 0}};
  EXPECT_THROW(adamw.step(d.bucket(gap), 1, 1e-3, 1.0f), std::invalid_argument);
  EXPECT_THROW(adamw.step(d.bucket(short_), 1, 1e-3, 1.0f), std::invalid_argument);
  EXPECT_THROW(adamw.step(d.bucket(negative), 1, 1e-3, 1.0f), std::invalid_argument);
}

// ----------------------------------------------------------------------------------------------- planner

// A small GPT whose parameters make several buckets of 0.25 MiB.
Config small_config(int steps = 3) {
  Config c = parse_config("model: {n_layer: 2, n_head: 2, n_embd: 128, seq_len: 16}\n"
                          "data: {path: " + kText.string() + ", val_fraction: 0.05}\n"
                          "optim: {lr: 3.0e-3, warmup_steps: 0, grad_clip: 1.0}\n"
                          "train: {batch_size: 4, steps: " + std::to_string(steps) + ", seed: 7, eval_batches: 1, threads: 2, precision: fp32}\n"
                          "offload: {bucket_mb: 0.25, cost_model: " + kCostModel.string() + "}\n"
                          "device: cpu\n",
                          "small", ".");
  return c;
}

offload::CostModel fp32_cost_model() {
  offload::CostModel cost = offload::CostModel::load(kCostModel);
  cost.fused_attention = false;
  return cost;
}

ParamGroup group(const std::string& params, bool frozen, std::optional<double> lr_scale = {}, std::optional<double> wd = {}) {
  return {params, frozen, lr_scale, wd};
}

// The embeddings and the first block frozen: a fine-tuning of the upper layers.
const std::vector<ParamGroup> kFreezeBottom{group("transformer.wte.weight|transformer.wpe.weight|transformer.h.0.*", true)};

models::ModelSpec spec_with(const Config& c, const std::vector<ParamGroup>& groups) {
  return with_frozen(models::build_model(c.model, c.train.batch_size, c.sequence(), c.precision()), groups);
}

TEST(FrozenPlan, FrozenBucketsHoldOnlyFrozenParametersAndHaveNoGradients) {
  const Config c = small_config();
  const models::ModelSpec spec = spec_with(c, kFreezeBottom);
  const offload::OffloadProblem p(spec, fp32_cost_model(), c.bucket_bytes(), int64_t(1) << 40);
  int frozen_buckets = 0;
  for (int b = 0; b < p.n_buckets; ++b) {
    const auto& bucket = p.layout.buckets()[b];
    for (int param : bucket.params) EXPECT_EQ(spec.params[param].frozen, bucket.frozen) << spec.params[param].name;
    EXPECT_EQ(p.first_grad_op[b] < 0, bucket.frozen) << "bucket " << b;
    frozen_buckets += bucket.frozen;
  }
  EXPECT_GE(frozen_buckets, 2);
  // The host buckets of a frozen bucket: its own master and working copy; zeros for m, v and gradients.
  const int64_t frozen_bytes = memory::HostBuckets::bytes_needed(p.layout, DType::F32, DType::F32);
  const offload::OffloadProblem unfrozen(spec_with(c, {}), fp32_cost_model(), c.bucket_bytes(), int64_t(1) << 40);
  EXPECT_LT(frozen_bytes, memory::HostBuckets::bytes_needed(unfrozen.layout, DType::F32, DType::F32));
  memory::PinnedHostPool pool(frozen_bytes, {});
  const memory::HostBuckets host(p.layout, pool, DType::F32, DType::F32);
  for (size_t param = 0; param < spec.params.size(); ++param) {
    const int b = p.layout.slot(static_cast<int>(param)).bucket;
    for (auto r : {Region::M, Region::V, Region::Grad}) {
      const memory::TensorView view = host.view(static_cast<int>(param), r);
      const float* f = static_cast<const float*>(view.data);
      EXPECT_TRUE(std::all_of(f, f + view.numel(), [](float x) { return x == 0.0f; })) << spec.params[param].name;
    }
    if (!spec.params[param].frozen) continue;
    EXPECT_EQ(host.region(b, Region::M).data, host.region(b, Region::V).data);  // one block of zeros
    EXPECT_NE(host.region(b, Region::Master).data, host.region(b, Region::M).data);
  }
  EXPECT_LT(p.trained_params(), p.total_params());
  // Without groups, the layout is the one it always was.
  const models::ModelSpec plain = spec_with(c, {});
  const offload::OffloadProblem q(plain, fp32_cost_model(), c.bucket_bytes(), int64_t(1) << 40);
  for (int b = 0; b < q.n_buckets; ++b) EXPECT_GE(q.first_grad_op[b], 0);
}

// Below the lowest trained parameter nothing is left to differentiate: those backward ops go, the
// forward and the ops of trained parameters stay; with a frozen block in the middle, everything stays.
TEST(FrozenPlan, BackwardBelowTheLowestTrainedParameterIsDropped) {
  const Config c = small_config();
  const models::ModelSpec plain = spec_with(c, {}), bottom = spec_with(c, kFreezeBottom);
  const models::ModelSpec middle = spec_with(c, {group("transformer.h.1.*", true)});
  auto backward_ops = [](const models::ModelSpec& s) {
    std::vector<std::string> names;
    for (const auto& op : s.ops)
      if (op.pass == models::Pass::Backward) names.push_back(op.name);
    return names;
  };
  EXPECT_EQ(middle.ops.size(), plain.ops.size());
  const std::vector<std::string> kept = backward_ops(bottom);
  EXPECT_LT(kept.size(), backward_ops(plain).size());
  for (const std::string& name : kept) {
    EXPECT_EQ(name.find("h.0."), std::string::npos) << name;  // block 0 and the embeddings are frozen
    EXPECT_EQ(name.find("wte"), std::string::npos) << name;
  }
  EXPECT_EQ(bottom.forward_flops(), plain.forward_flops());
  EXPECT_LT(bottom.step_flops(), plain.step_flops());
  // Every trained parameter still has a backward op accumulating its gradient.
  for (size_t p = 0; p < bottom.params.size(); ++p) {
    if (bottom.params[p].frozen) continue;
    const bool has = std::any_of(bottom.ops.begin(), bottom.ops.end(), [&](const models::OpSpec& op) {
      return op.pass == models::Pass::Backward && std::find(op.params.begin(), op.params.end(), int(p)) != op.params.end();
    });
    EXPECT_TRUE(has) << bottom.params[p].name;
  }
}

// What a plan does with each bucket: which actions name it, and whether its gradients or optimizer state
// take device memory.
struct PlanUse {
  int grad_copies = 0, adam = 0, uploads = 0;
  bool grads = false, state = false;
};

std::vector<PlanUse> uses_of(const offload::StepPlan& plan) {
  std::vector<PlanUse> use(plan.problem.n_buckets);
  for (const auto& point : plan.schedule.before)
    for (const offload::Action& a : point) {
      if (a.bucket < 0) continue;
      use[a.bucket].grad_copies += a.kind == offload::Action::Kind::OffloadGrads;
      use[a.bucket].adam += a.kind == offload::Action::Kind::CpuAdam;
      use[a.bucket].uploads += a.kind == offload::Action::Kind::Upload;
    }
  for (const auto& t : plan.memory.tensors) {
    if (t.kind == offload::DeviceTensor::Kind::Grads) use[t.index].grads = true;
    if (t.kind == offload::DeviceTensor::Kind::OptimizerState) use[t.index].state = true;
  }
  return use;
}

TEST(FrozenPlan, ThePlannerSchedulesNothingForFrozenBucketsAndNeedsLessMemory) {
  Config c = small_config();
  c.train.activation_checkpointing = "false";
  const models::ModelSpec frozen = spec_with(c, kFreezeBottom), plain = spec_with(c, {});
  const offload::CostModel cost = fp32_cost_model();
  const offload::OffloadProblem p(frozen, cost, c.bucket_bytes(), int64_t(1) << 40), q(plain, cost, c.bucket_bytes(), int64_t(1) << 40);
  for (const char* policy : {"resident", "zero-offload", "greedy"}) {
    const bool greedy = std::string(policy) == "greedy";  // offloading: a budget well below what resident needs
    const int64_t budget = greedy ? offload::minimum_device_bytes(q) * 3 / 2 : 0;
    const offload::StepPlan with = plan_for_config(c, frozen, cost, budget, policy);
    const offload::StepPlan without = plan_for_config(c, plain, cost, budget, policy);
    const std::vector<PlanUse> use = uses_of(with);
    for (int b = 0; b < with.problem.n_buckets; ++b) {
      const bool is_frozen = with.problem.layout.buckets()[b].frozen;
      if (!is_frozen) continue;
      EXPECT_EQ(use[b].grad_copies + use[b].adam + use[b].uploads, 0) << policy << ", bucket " << b;
      EXPECT_FALSE(use[b].grads) << policy << ", bucket " << b;
      EXPECT_FALSE(use[b].state) << policy << ", bucket " << b;
    }
    const offload::SimResult a = offload::simulate(with.problem, with.schedule, with.memory);
    const offload::SimResult b = offload::simulate(without.problem, without.schedule, without.memory);
    ASSERT_TRUE(a.error.empty()) << a.error;
    if (!greedy) {  // greedy spends what it saves on residency
      EXPECT_LT(a.peak_device_bytes, b.peak_device_bytes) << policy;
    }
    if (std::string(policy) != "resident") {
      EXPECT_LT(a.d2h_bytes, b.d2h_bytes) << policy;
      EXPECT_LT(a.cpu_busy_s, b.cpu_busy_s) << policy;
    }
  }
  // Freezing the bottom does not lower the busiest op of the top, nor the compute that bounds this small
  // step; it never raises either.
  EXPECT_LE(offload::minimum_device_bytes(p), offload::minimum_device_bytes(q));
  EXPECT_LE(offload::lower_bound_step_s(p), offload::lower_bound_step_s(q));
}

// ---------------------------------------------------------------------------------------------- executor

// One run of the Executor over `steps` batches from the same initial weights, with the groups marked on
// the spec and passed to the executor; what it leaves in the host buckets.
struct GroupRun {
  std::vector<std::vector<float>> initial, master, m, v;  // per parameter
  std::vector<float> losses;
  int64_t d2h_bytes = 0;  // of the last step
};

GroupRun run_executor(const Config& c, const std::vector<ParamGroup>& groups, const std::string& policy, int steps, double lr,
                      double budget_factor = 0) {
  const models::ModelSpec spec = spec_with(c, groups);
  const std::vector<ParamSettings> settings = groups.empty() ? std::vector<ParamSettings>()
                                                             : resolve_param_groups(groups, spec, c.optim.weight_decay);
  const offload::CostModel cost = fp32_cost_model();
  int64_t budget = 0;
  if (budget_factor > 0) {
    const offload::OffloadProblem p(spec, cost, c.bucket_bytes(), 1);
    budget = static_cast<int64_t>(offload::minimum_device_bytes(p) * budget_factor);
  }
  const offload::StepPlan plan = plan_for_config(c, spec, cost, budget, policy);
  device::HostDevice dev({plan.memory.layout.peak, 0, 2, nullptr});
  const memory::HostBuckets::GradLanding landing = Executor::gradient_landing(plan);  // as the trainer lays them out
  const auto pool = dev.make_host_pool(memory::HostBuckets::bytes_needed(plan.problem.layout, plan.problem.precision,
                                                                         plan.problem.precision, false, landing) +
                                       Executor::host_bytes_needed(spec, plan));
  memory::HostBuckets host(plan.problem.layout, *pool, plan.problem.precision, plan.problem.precision, false, landing);
  const auto& o = c.optim;
  const cpu_optim::CpuAdamW adamw({{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay}, "auto", 2});
  models::ParameterStore params(spec.params);
  models::init_model(c.model, spec, params, c.train.seed);
  GroupRun r;
  for (int p = 0; p < params.count(); ++p) {
    std::memcpy(host.view(p, Region::Master).data, params.value(p).data(), params.value(p).size_bytes());
    std::memcpy(host.view(p, Region::Working).data, params.value(p).data(), params.value(p).size_bytes());
    r.initial.emplace_back(params.value(p).begin(), params.value(p).end());
  }
  Executor executor(spec, plan, host, *pool, dev, adamw, {static_cast<float>(o.grad_clip), settings}, nullptr);
  executor.upload_state();
  const dataset::TextDataset data(c.data.path, c.data.val_fraction, c.sequence());
  for (int s = 0; s < steps; ++s) {
    const std::vector<dataset::Batch> batch{data.train_batch(s, 0, c.train.batch_size)};
    const StepResult result = executor.step(batch, s + 1, lr);
    r.losses.push_back(result.loss), r.d2h_bytes = result.d2h_bytes;
  }
  executor.download_state();
  for (int p = 0; p < params.count(); ++p)
    for (auto [region, out] : {std::pair{Region::Master, &r.master}, std::pair{Region::M, &r.m}, std::pair{Region::V, &r.v}}) {
      const memory::TensorView view = host.view(p, region);
      const float* f = static_cast<const float*>(view.data);
      out->emplace_back(f, f + params.value(p).size());
    }
  return r;
}

bool all_zero(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; });
}

TEST(FrozenExecutor, FrozenParametersStayBitwiseAndEveryPolicyAgrees) {
  const Config c = small_config();
  std::vector<ParamGroup> groups = kFreezeBottom;
  groups.push_back(group("*.bias|*ln_*", false, {}, 0.0));
  groups.push_back(group("transformer.h.1.mlp.*", false, 10.0));
  const models::ModelSpec spec = spec_with(c, groups);
  const GroupRun resident = run_executor(c, groups, "resident", 3, 1e-3);
  int frozen = 0;
  for (size_t p = 0; p < spec.params.size(); ++p) {
    const std::string& name = spec.params[p].name;
    if (spec.params[p].frozen) {
      ++frozen;
      EXPECT_EQ(resident.master[p], resident.initial[p]) << name;  // never updated
      EXPECT_TRUE(all_zero(resident.m[p]) && all_zero(resident.v[p])) << name;
    } else {
      EXPECT_NE(resident.master[p], resident.initial[p]) << name;
    }
  }
  EXPECT_EQ(frozen, 2 + 12);  // wte, wpe and the first block's 12 tensors
  for (const char* policy : {"zero-offload", "greedy"}) {
    const GroupRun offloaded = run_executor(c, groups, policy, 3, 1e-3, std::string(policy) == "greedy" ? 1.5 : 0);
    EXPECT_EQ(offloaded.losses, resident.losses) << policy;
    EXPECT_EQ(offloaded.master, resident.master) << policy;
    EXPECT_EQ(offloaded.m, resident.m) << policy;
  }
}

// lr_scale 0 leaves the weights as they are but still computes, ships and averages their gradients;
// frozen does none of that.
TEST(FrozenExecutor, LrScaleZeroIsNotFrozen) {
  const Config c = small_config();
  const std::vector<ParamGroup> zero_lr{group("transformer.wte.weight|transformer.wpe.weight|transformer.h.0.*", false, 0.0)};
  const GroupRun plain = run_executor(c, {}, "zero-offload", 2, 1e-3);
  const GroupRun still = run_executor(c, zero_lr, "zero-offload", 2, 1e-3);
  const GroupRun frozen = run_executor(c, kFreezeBottom, "zero-offload", 2, 1e-3);
  const models::ModelSpec spec = spec_with(c, kFreezeBottom);
  for (size_t p = 0; p < spec.params.size(); ++p) {
    if (!spec.params[p].frozen) continue;
    EXPECT_EQ(still.master[p], still.initial[p]) << spec.params[p].name;
    EXPECT_EQ(frozen.master[p], frozen.initial[p]) << spec.params[p].name;
    EXPECT_FALSE(all_zero(still.m[p])) << spec.params[p].name;
    EXPECT_TRUE(all_zero(frozen.m[p])) << spec.params[p].name;
  }
  EXPECT_EQ(still.d2h_bytes, plain.d2h_bytes);
  EXPECT_LT(frozen.d2h_bytes, plain.d2h_bytes);
  EXPECT_EQ(still.losses[0], frozen.losses[0]);  // the same weights in the first forward
}

// Without clipping (which couples every gradient through the norm), freezing a block is lr_scale 0 for its
// weights: every weight ends bitwise alike, those below it included, whose gradients flow through the
// frozen block's ops (which get no weight-gradient operands).
TEST(FrozenExecutor, WithoutClippingFrozenWeightsTrainLikeLrScaleZero) {
  Config c = small_config();
  c.optim.grad_clip = 0;
  for (const char* policy : {"resident", "zero-offload"}) {
    const GroupRun frozen = run_executor(c, {group("transformer.h.1.*", true)}, policy, 2, 1e-3);
    const GroupRun still = run_executor(c, {group("transformer.h.1.*", false, 0.0)}, policy, 2, 1e-3);
    EXPECT_EQ(frozen.losses, still.losses) << policy;
    EXPECT_EQ(frozen.master, still.master) << policy;
    EXPECT_NE(frozen.master, frozen.initial) << policy;
  }
}

// At the first step every parameter sees the same gradients with or without groups (clipping off), so
// a group's parameters end where a run with its settings for every parameter puts them: weight_decay 0
// is AdamW without decay, lr_scale 10 is AdamW at ten times the lr. On the CPU and the device AdamW alike.
TEST(FrozenExecutor, AGroupsSettingsAreAdamWsOwnAtTheFirstStep) {
  Config c = small_config();
  c.optim.grad_clip = 0;
  const std::vector<ParamGroup> groups{group("*.bias|*ln_*", false, {}, 0.0), group("transformer.h.1.*", false, 10.0)};
  const models::ModelSpec spec = spec_with(c, groups);
  const std::vector<ParamSettings> settings = resolve_param_groups(groups, spec, c.optim.weight_decay);
  Config no_decay = c;
  no_decay.optim.weight_decay = 0;
  for (const char* policy : {"resident", "zero-offload"}) {
    const GroupRun grouped = run_executor(c, groups, policy, 1, 1e-3);
    const GroupRun plain = run_executor(c, {}, policy, 1, 1e-3);
    const GroupRun without_decay = run_executor(no_decay, {}, policy, 1, 1e-3);
    const GroupRun faster = run_executor(c, {}, policy, 1, 1e-3 * 10.0);
    for (size_t p = 0; p < spec.params.size(); ++p) {
      const GroupRun& expected = settings[p].group == 0 ? without_decay : settings[p].group == 1 ? faster : plain;
      EXPECT_EQ(grouped.master[p], expected.master[p]) << policy << ", " << spec.params[p].name;
      if (settings[p].group >= 0 && !all_zero(grouped.initial[p])) {  // zero biases decay to zero either way
        EXPECT_NE(grouped.master[p], plain.master[p]) << policy << ", " << spec.params[p].name;
      }
    }
  }
}

// The trainer reads optim.groups: a run with the bottom frozen sends fewer gradient bytes to the host,
// inside its red zones, and a group that matches nothing stops it before anything is allocated.
TEST(FrozenTrainer, TrainsWithGroupsFromTheConfig) {
  Config c = small_config(3);
  c.offload.policy = "zero-offload";
  c.train.activation_checkpointing = "false";
  TrainOptions opt;
  opt.progress = nullptr;
  opt.red_zone_bytes = 64;
  const TrainSummary plain = train(c, opt);
  c.optim.groups = {kFreezeBottom[0], group("*.bias|*ln_*", false, {}, 0.0)};
  const TrainSummary frozen = train(c, opt);
  ASSERT_EQ(frozen.losses.size(), 3u);
  EXPECT_EQ(frozen.losses[0], plain.losses[0]);
  EXPECT_NE(frozen.losses[2], plain.losses[2]);
  EXPECT_LT(frozen.d2h_bytes, plain.d2h_bytes);
  EXPECT_LT(frozen.arena_bytes, plain.arena_bytes);  // fewer gradient buffers on the device
  // On the host, frozen buckets keep their master and working copy only (m, v and gradients: shared zeros).
  EXPECT_LT(frozen.host_bucket_bytes, plain.host_bucket_bytes);
  // Recomputation: a frozen block without backward ops is never recomputed; the others are, bitwise.
  c.train.activation_checkpointing = "true";
  const TrainSummary recomputed = train(c, opt);
  EXPECT_EQ(recomputed.losses, frozen.losses);
  EXPECT_EQ(recomputed.checkpointed_blocks, 2);
  c.train.activation_checkpointing = "false";
  // The delayed update (one step behind, working copies swapped) runs with frozen buckets left out.
  c.offload.overlap = "delayed", c.offload.sync_steps = 1;
  const TrainSummary delayed = train(c, opt);
  ASSERT_EQ(delayed.losses.size(), 3u);
  EXPECT_EQ(delayed.losses[0], frozen.losses[0]);
  EXPECT_EQ(delayed.d2h_bytes, frozen.d2h_bytes);
  EXPECT_TRUE(std::isfinite(delayed.losses[2]));
  c.train.grad_accum = 2;  // fp32 sums over micro-batches, on both parities
  const TrainSummary summed = train(c, opt);
  EXPECT_TRUE(std::isfinite(summed.losses[2]));
  EXPECT_LT(summed.d2h_bytes, plain.d2h_bytes * 2);
  c.train.grad_accum = 1;
  c.offload.overlap = "backward";
  c.optim.groups = {group("bert.*", true)};
  EXPECT_NE(invalid_argument_of([&] { train(c, opt); }).find("optim.groups[0].params: 'bert.*' matches no parameter"), std::string::npos);
}

// A run with frozen parameters stopped after a checkpoint resumes bit-identically (its frozen moments and
// the pending delayed update's frozen gradients are the shared zeros, written and read back as zeros);
// other groups are another run.
TEST(FrozenTrainer, AStoppedRunWithGroupsResumesBitIdentically) {
  const auto root = testing::scratch_path("param-groups-checkpoints");
  std::filesystem::remove_all(root);
  Config c = small_config(4);
  c.offload.policy = "zero-offload";
  c.optim.groups = {kFreezeBottom[0], group("*.bias|*ln_*", false, {}, 0.0)};
  c.train.checkpoint_every = 2;
  c.offload.overlap = "delayed", c.offload.sync_steps = 1, c.train.grad_accum = 2;
  TrainOptions opt;
  opt.progress = nullptr;
  c.train.checkpoint_dir = root / "straight";
  const TrainSummary straight = train(c, opt);
  c.train.checkpoint_dir = root / "stopped";
  TrainOptions stop = opt;
  stop.stop_after = 2;
  const TrainSummary first = train(c, stop);
  ASSERT_EQ(first.losses.size(), 2u);
  TrainOptions resume = opt;
  resume.resume = root / "stopped";
  const TrainSummary second = train(c, resume);
  ASSERT_EQ(second.losses.size(), 2u);
  EXPECT_EQ(second.losses[0], straight.losses[2]);
  EXPECT_EQ(second.losses[1], straight.losses[3]);
  Config other = c;
  other.optim.groups.pop_back();
  EXPECT_NE(testing::error_of([&] { train(other, resume); }).find("optim.groups"), std::string::npos);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace ferry::engine
