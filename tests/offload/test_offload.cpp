// offload/: the cost model, the Simulator's checks, the device memory, the policies' properties on random
// models, budgets and cost models, greedy and the lower bound against an exhaustive search, plan_step's rules
// (one layout per plan, the overlap rule, budget errors) and the planner's parallel parts.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <thread>

#include "models/bert.h"
#include "models/gpt2.h"
#include "foundation/rng.h"
#include "offload/cost_model.h"
#include "offload/in_parallel.h"
#include "offload/policies.h"
#include "offload/simulator.h"
#include "offload/stream_reuse.h"
#include "plan_inspection.h"
#include "test_helpers.h"

namespace ferry::offload {
namespace {

// The offload tests plan as on a GPU, in bf16: weights, activations and their gradients take 2 bytes.
models::ModelSpec gpt2_bf16(const models::GptConfig& c, int64_t batch, int64_t seq) {
  models::ModelSpec spec = models::build_gpt2(c, batch, seq);
  spec.set_precision(DType::BF16);
  return spec;
}
models::ModelSpec bert_bf16(const models::BertConfig& c, int64_t batch, int64_t seq) {
  models::ModelSpec spec = models::build_bert(c, batch, seq);
  spec.set_precision(DType::BF16);
  return spec;
}

CostModel random_cost(Rng& rng) {
  CostModel c;
  c.name = "random";
  c.flops_per_s = 1e9 * (1 + rng.below(100));
  c.memory_bytes_per_s = 1e9 * (1 + rng.below(50));
  c.h2d.gbps = 0.05 * (1 + rng.below(100));
  c.d2h.gbps = 0.05 * (1 + rng.below(100));
  c.cpu_adam_params_per_s = 1e6 * (1 + rng.below(1000));
  c.device_adam_params_per_s = 1e7 * (1 + rng.below(1000));
  return c;
}

// A schedule simulated on its own layout.
SimResult simulate_laid_out(const OffloadProblem& p, const Schedule& s) { return simulate(p, s, lay_out(p, s)); }
SimResult simulate_planned(const OffloadProblem& p, const PlannedSchedule& planned) {
  return simulate(p, planned.schedule, planned.memory);
}
SimResult simulate_plan(const StepPlan& plan) { return simulate(plan.problem, plan.schedule, plan.memory); }

// A cost model that leaves a figure out is an error naming the file and every missing key: planning with a
// default in its place would predict for a machine nobody described.
TEST(CostModel, MissingKeysAreNamed) {
  const auto path = testing::source_path("configs/cost_models/h100-assumed.json");
  std::ifstream in(path);
  const nlohmann::json shipped = nlohmann::json::parse(in);
  EXPECT_NO_THROW(CostModel::from_json(shipped, "shipped"));
  for (const char* key : {"flops_per_s", "memory_bytes_per_s", "op_overhead_s", "fused_attention", "h2d", "d2h",
                          "cpu_adam_params_per_s", "cpu_norm_params_per_s", "device_adam_params_per_s"}) {
    nlohmann::json j = shipped;
    j.erase(key);
    try {
      CostModel::from_json(j, "costs.json");
      ADD_FAILURE() << key;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("costs.json: the cost model lacks ") + key), std::string::npos) << e.what();
    }
  }
  nlohmann::json j = shipped;
  j["h2d"].erase("latency_s");
  j.erase("op_overhead_s");
  try {
    CostModel::from_json(j, "costs.json");
    ADD_FAILURE();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("costs.json: the cost model lacks op_overhead_s, h2d.latency_s;"), std::string::npos) << e.what();
  }
  j = shipped;
  j["d2h"]["latency_s"] = -1;  // was clamped to 0 without a word
  EXPECT_THROW(CostModel::from_json(j, "costs.json"), std::runtime_error);
  EXPECT_NO_THROW(CostModel::from_json(CostModel{}.to_json(), "defaults written out"));
  // Files of earlier builds give the element sizes too; train.precision decides them now, so they are ignored.
  j = shipped;
  j["activation_bytes"] = 4, j["weight_bytes"] = 4;
  EXPECT_NO_THROW(CostModel::from_json(j, "older.json"));
}

// The compact state's CPU AdamW has its own rate; a file written before it was measured takes the exact rate
// times the stated ratio, and a file that gives it keeps it.
TEST(CostModel, CompactAdamRateIsReadAndOlderFilesFallBackToTheStatedRatio) {
  std::ifstream in(testing::source_path("configs/cost_models/h100-assumed.json"));
  nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_DOUBLE_EQ(CostModel::from_json(j, "shipped").cpu_compact_adam_params_per_s, 2.5e9);
  j.erase("cpu_compact_adam_params_per_s");
  const CostModel older = CostModel::from_json(j, "older.json");
  EXPECT_DOUBLE_EQ(older.cpu_compact_adam_params_per_s, CostModel::kCompactAdamRatio * 3.2e9);
  EXPECT_DOUBLE_EQ(CostModel::from_json(older.to_json(), "round trip").cpu_compact_adam_params_per_s,
                   older.cpu_compact_adam_params_per_s);
  j["cpu_compact_adam_params_per_s"] = 0;
  EXPECT_THROW(CostModel::from_json(j, "bad.json"), std::runtime_error);
}

// A plan of the compact state charges its CPU AdamW at the compact rate: in the Simulator's CPU time, in the
// pipelined update's readiness greedy builds on, and in the lower bound.
TEST(CostModel, TheCompactStateIsChargedItsOwnAdamRate) {
  const models::ModelSpec spec = gpt2_bf16({4, 4, 256, 1024, 128}, 4, 128);
  CostModel cost = CostModel::load(testing::source_path("configs/cost_models/h100-assumed.json"));
  cost.cpu_adam_params_per_s = 4e9, cost.cpu_compact_adam_params_per_s = 1e9;
  OffloadProblem exact(spec, cost, 1 << 20, int64_t(1) << 40), compact = exact;
  compact.compact_state = true;
  const double params = double(exact.trained_params());
  const Schedule s = make_schedule(exact, Policy::ZeroOffload).schedule;
  const double cpu_exact = simulate_laid_out(exact, s).cpu_busy_s,
               cpu_compact = simulate_laid_out(compact, s).cpu_busy_s;
  EXPECT_NEAR(cpu_compact - cpu_exact, params / 1e9 - params / 4e9, 1e-9);
  EXPECT_GE(lower_bound_step_s(compact, Overlap::Backward), params / 1e9);
  EXPECT_LT(lower_bound_step_s(exact, Overlap::Backward), params / 1e9);
  // Pipelined, the forward waits for each bucket's update: the compact state's step is longer by the slower rate.
  const Schedule pipelined = with_pipelined_update(s);
  EXPECT_GT(simulate_laid_out(compact, pipelined).step_s,
            simulate_laid_out(exact, pipelined).step_s + 0.5 * (params / 1e9 - params / 4e9));
}

// In a 2-byte plan, token ids, LayerNorm statistics and losses keep their 4 bytes (a kernel writing an fp32
// statistic into 2 bytes a element would write past it); activations and their gradients take 2.
TEST(CostModel, TensorBytesFollowThePrecisionExceptFixedDtypes) {
  const models::ModelSpec spec = gpt2_bf16({1, 2, 64, 256, 16}, 2, 16);
  CostModel bf16;
  bf16.fused_attention = false;
  auto bytes = [&](const std::string& name) { return bf16.tensor_bytes(spec, spec.tensor_index(name)); };
  const int64_t tokens = 2 * 16;
  EXPECT_EQ(bytes("tokens"), tokens * 4);
  EXPECT_EQ(bytes("targets"), tokens * 4);
  EXPECT_EQ(bytes("h.0.ln_1.mean"), tokens * 4);
  EXPECT_EQ(bytes("h.0.ln_1.rstd"), tokens * 4);
  EXPECT_EQ(bytes("loss.out"), tokens * 4);
  EXPECT_EQ(bytes("h.0.ln_1.out"), tokens * 64 * 2);
  EXPECT_EQ(bytes("h.0.ln_1.out.grad"), tokens * 64 * 2);
  EXPECT_EQ(bytes("h.0.attn.probs"), 2 * 2 * 16 * 16 * 2);
  bf16.fused_attention = true;
  EXPECT_EQ(bytes("h.0.attn.probs"), 2 * 2 * 16 * 4);  // one fp32 log-sum-exp per row
}

TEST(CostModel, ShippedH100ModelLoadsAndRoundTrips) {
  const CostModel c = CostModel::load(testing::source_path("configs/cost_models/h100-assumed.json"));
  EXPECT_TRUE(c.assumed);
  EXPECT_DOUBLE_EQ(c.h2d.gbps, 50);
  const CostModel again = CostModel::from_json(c.to_json(), "round trip");
  EXPECT_EQ(again.to_json(), c.to_json());
  nlohmann::json bad = c.to_json();
  bad["h2d"]["gbps"] = -1;
  EXPECT_THROW(CostModel::from_json(bad, "bad"), std::runtime_error);
  bad = c.to_json();
  bad["flops_per_s"] = "fast";
  EXPECT_THROW(CostModel::from_json(bad, "bad"), std::runtime_error);
  // Roofline: a big matmul is bound by FLOPs, a residual add by bytes.
  const models::ModelSpec spec = gpt2_bf16({12, 12, 768, 50257, 1024}, 4, 1024);
  for (const auto& op : spec.ops) {
    if (op.name == "lm_head.fwd") {
      EXPECT_NEAR(c.op_seconds(spec, op), op.flops / c.flops_per_s + c.op_overhead_s, 1e-3 * op.flops / c.flops_per_s);
    }
    if (op.name == "h.0.res_1.fwd") {
      EXPECT_GT(c.op_seconds(spec, op), 10 * op.flops / c.flops_per_s);
    }
  }
}

OffloadProblem small_problem(Rng& rng, int64_t budget_fraction_permille = 1000, int grad_accum = 1) {
  const int layers = 1 + static_cast<int>(rng.below(3)), heads = 1 + static_cast<int>(rng.below(2));
  const models::ModelSpec spec = gpt2_bf16({layers, heads, heads * 32, 256, 32}, 2, 32);
  const int64_t bucket = 8192 * (1 + static_cast<int64_t>(rng.below(8)));
  const OffloadProblem base(spec, random_cost(rng), bucket, int64_t(1) << 40, {}, grad_accum);
  const int64_t everything = make_schedule(base, Policy::Resident).memory.layout.peak;
  const int64_t least = minimum_device_bytes(base);
  const int64_t budget = least + (everything - least) * budget_fraction_permille / 1000;
  OffloadProblem p = base;
  p.budget_bytes = budget;
  return p;
}

TEST(Simulator, InvalidSchedulesNameTheOpAndTheBucket) {
  const models::ModelSpec spec = gpt2_bf16({1, 1, 32, 256, 16}, 1, 16);
  const OffloadProblem p(spec, CostModel{}, 4096, int64_t(1) << 40);
  ASSERT_GT(p.n_buckets, 1);
  auto base = [&] {
    Schedule s;
    s.policy = "test";
    s.before.resize(p.n_ops + 1);
    s.resident.assign(p.n_buckets, true);
    s.device_optimizer.assign(p.n_buckets, true);
    s.before[p.n_ops] = {{Action::Kind::DeviceAdam, -1}};
    return s;
  };
  Schedule s = base();
  s.resident[0] = s.device_optimizer[0] = false;  // bucket 0 (wte) is used by op 0 but never fetched
  EXPECT_NE(simulate_laid_out(p, s).error.find("op 0 uses bucket 0 before it has arrived"), std::string::npos)
      << simulate_laid_out(p, s).error;
  s.before[0] = {{Action::Kind::Prefetch, 0}};  // fetched but not waited for
  EXPECT_NE(simulate_laid_out(p, s).error.find("uses bucket 0 before it has arrived"), std::string::npos);
  s.before[0].push_back({Action::Kind::Wait, 0});
  s.before[1] = {{Action::Kind::Release, 0}};  // released while later ops still use it
  EXPECT_NE(simulate_laid_out(p, s).error.find("before it has arrived"), std::string::npos);
  s.before[1] = {{Action::Kind::Prefetch, p.n_buckets}};
  EXPECT_NE(simulate_laid_out(p, s).error.find("no such bucket"), std::string::npos) << simulate_laid_out(p, s).error;
  Schedule r = s;  // bucket 1 resident, its AdamW on the CPU: its slot is never released
  r.device_optimizer[1] = false;
  r.before[1] = {{Action::Kind::Release, 1}};
  EXPECT_NE(simulate_laid_out(p, r).error.find("release of bucket 1: releases a bucket that is resident"),
            std::string::npos)
      << simulate_laid_out(p, r).error;

  Schedule g = base();
  g.device_optimizer.assign(p.n_buckets, false);
  g.before[p.n_ops].clear();
  g.before[1] = {{Action::Kind::OffloadGrads, 0}};  // before backward wrote them
  EXPECT_NE(simulate_laid_out(p, g).error.find("offloads gradients that op"), std::string::npos) << simulate_laid_out(p, g).error;
  g.before[1].clear();
  const int last = p.last_grad_op[0];  // right before the op that writes them last: one op too early
  g.before[last] = {{Action::Kind::OffloadGrads, 0}};
  EXPECT_NE(
      simulate_laid_out(p, g).error.find("offloads gradients that op " + std::to_string(last) + " has yet to write"),
      std::string::npos)
      << simulate_laid_out(p, g).error;
  g = base();
  g.device_optimizer.assign(p.n_buckets, false);
  g.before[p.n_ops] = {{Action::Kind::CpuAdam, 1}};
  EXPECT_NE(simulate_laid_out(p, g).error.find("cpu-adam of bucket 1: runs AdamW before the gradients are offloaded"),
            std::string::npos) << simulate_laid_out(p, g).error;
  g.before[p.n_ops] = {{Action::Kind::ReleaseGrads, 1}};
  EXPECT_NE(simulate_laid_out(p, g).error.find("releases gradients before offloading them"), std::string::npos);
  g.before[p.n_ops].clear();
  EXPECT_NE(simulate_laid_out(p, g).error.find("never updated by AdamW"), std::string::npos);
}

TEST(Simulator, TakesThePeakFromTheGivenLayoutAndRejectsAnotherSchedules) {
  Rng rng(3);
  const OffloadProblem p = small_problem(rng, 100);
  const PlannedSchedule greedy = make_schedule(p, Policy::Greedy);
  const SimResult r = simulate_planned(p, greedy);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.peak_device_bytes, greedy.memory.layout.peak);
  // The same layout with more room: the peak is the layout's, not a Planner run of the Simulator's own.
  DeviceMemory wider = greedy.memory;
  wider.layout.peak += 4096;
  EXPECT_EQ(simulate(p, greedy.schedule, wider).peak_device_bytes, greedy.memory.layout.peak + 4096);
  // A layout of another schedule is refused, naming the tensor that differs.
  OffloadProblem roomy = p;
  roomy.budget_bytes = int64_t(1) << 40;
  const PlannedSchedule zero = make_schedule(roomy, Policy::ZeroOffload);
  const SimResult mixed = simulate(p, zero.schedule, greedy.memory);
  EXPECT_FALSE(mixed.fits);
  EXPECT_NE(mixed.error.find("laid out for"), std::string::npos) << mixed.error;
}

// The CPU's busy time in a step: per trained bucket a statistics pass over its gradients, with micro-batches
// also the fp32 sum of each one's (the last micro-batch costs both), and its AdamW, as the executor runs them.
TEST(Simulator, TheCpuSumsEveryMicroBatchsGradientsBesideTheStatisticsAndAdamW) {
  Rng rng(11);
  for (int accum : {1, 3}) {
    OffloadProblem p = small_problem(rng, 1000, accum);
    p.budget_bytes = int64_t(1) << 40;
    const SimResult r = simulate_planned(p, make_schedule(p, Policy::ZeroOffload));
    ASSERT_EQ(r.error, "");
    const int passes = accum > 1 ? accum + 1 : 1;
    double expected = 0;
    for (int b = 0; b < p.n_buckets; ++b)
      if (p.first_grad_op[b] >= 0)
        expected += passes * double(p.bucket_params[b]) / p.cost.cpu_norm_params_per_s +
                    double(p.bucket_params[b]) / p.cpu_adam_params_per_s();
    EXPECT_NEAR(r.cpu_busy_s, expected, 1e-9 * expected) << "grad_accum " << accum;
  }
}

// check_stream_reuse on hand-made timings: a tensor written into bytes that a copy stream is still reading
// (gradients on their way to the host) is caught, naming both tensors, the bytes and the times; written once
// they have left, or elsewhere, it is not. Red zones count as the tensor's bytes.
TEST(StreamReuse, AWriteBeforeACopyStreamIsDoneWithTheBytesIsCaught) {
  using Kind = DeviceTensor::Kind;
  DeviceMemory m;
  m.tensors = {{Kind::Weights, 1, {1024, 256, 3, 4}}, {Kind::Grads, 0, {1024, 256, 0, 2}}, {Kind::Activation, 0, {512, 256, 3, 3}}};
  m.layout.offsets = {512, 0, 4096};
  m.layout.peak = 8192;
  StreamTimes t;
  t.op_start = {0, 1, 2, 3, 4}, t.op_end = {1, 2, 3, 4, 5};
  t.window_copy_start = {2.5};  // the prefetch of bucket 1 starts while bucket 0's gradients are leaving
  t.grads_landed = {3.5, 0};
  const std::string caught = check_stream_reuse(m, t);
  EXPECT_NE(caught.find("the weights of bucket 1 (ops 3..4) is written at 2.500000 s into bytes [512, 1024) that the gradients "
                        "of bucket 0 (ops 0..2) holds until 3.500000 s"),
            std::string::npos)
      << caught;
  t.window_copy_start = {3.5};
  EXPECT_EQ(check_stream_reuse(m, t), "");
  // An op's output in those bytes: op 3 starts at 3.0, before the gradients have left.
  m.layout.offsets[2] = 256;
  EXPECT_NE(check_stream_reuse(m, t).find("the activation 0 (ops 3..3) is written at 3.000000 s into bytes [256, 768)"),
            std::string::npos)
      << check_stream_reuse(m, t);
  t.grads_landed = {3.0, 0};
  EXPECT_EQ(check_stream_reuse(m, t), "");
  // The window right after the gradients: apart, unless the gradients' red zone reaches it.
  t.grads_landed = {3.5, 0}, t.window_copy_start = {2.5}, m.layout.offsets = {1024, 0, 4096};
  EXPECT_EQ(check_stream_reuse(m, t), "");
  m.red_zone_bytes = 64;
  EXPECT_NE(check_stream_reuse(m, t).find("bytes [1024, 1088)"), std::string::npos) << check_stream_reuse(m, t);
}

// A prefetch into bytes whose gradients are released at its own point must wait until they have left: the
// schedule and layout assume the copy ended in time, but a link slower than planned delays it. Simulated on
// a link 20x slower back than planned, every such plan stays valid (the prefetch starts once the gradients
// have left, as the Executor makes it); without that wait the Simulator's cross-stream check refuses them.
TEST(Simulator, APrefetchIntoReleasedGradientsStartsOnceTheyHaveLeft) {
  Rng rng(17);
  int shared = 0;
  for (int trial = 0; trial < 40; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const OffloadProblem p = small_problem(rng, static_cast<int64_t>(rng.below(300)));
    OffloadProblem slow_back = p;
    slow_back.cost.d2h.gbps = p.cost.d2h.gbps / 20;
    for (Policy policy : {Policy::ChunkLru, Policy::Greedy}) {
      try {
        const PlannedSchedule planned = make_schedule(p, policy);
        const int here = testing::prefetches_into_released_gradients(planned.schedule, planned.memory, p.n_buckets, false);
        shared += here;
        const SimResult r = simulate(slow_back, planned.schedule, planned.memory);
        ASSERT_EQ(r.error, "") << to_string(policy) << ", " << here << " prefetches into released gradients";
      } catch (const BudgetError&) {
      }
    }
  }
  EXPECT_GT(shared, 0) << "no plan put a prefetch where gradients released at its point lay: nothing was checked";
}

TEST(DeviceMemory, RedZonesFollowEveryTensorAndCountAgainstTheBudget) {
  Rng rng(5);
  const OffloadProblem p = small_problem(rng, 300);
  const Schedule s = make_schedule(p, Policy::Greedy).schedule;
  const DeviceMemory plain = lay_out(p, s);
  constexpr int64_t kRedZone = 512;
  const DeviceMemory zoned = lay_out(p, s, kRedZone);
  ASSERT_EQ(zoned.tensors.size(), plain.tensors.size());
  EXPECT_EQ(zoned.red_zone_bytes, kRedZone);
  EXPECT_GT(zoned.layout.peak, plain.layout.peak);
  // No tensor alive at the same op overlaps another's bytes or its red zone, but the loss's gradient, which is
  // written over the logits (at their offset).
  int in_place = 0;
  for (size_t i = 0; i < zoned.tensors.size(); ++i)
    for (size_t j = 0; j < zoned.tensors.size(); ++j) {
      const auto &a = zoned.tensors[i].life, &b = zoned.tensors[j].life;
      if (i == j || a.last < b.first || b.last < a.first) continue;
      if (a.in_place_of == static_cast<int>(j)) {
        EXPECT_EQ(zoned.layout.offsets[i], zoned.layout.offsets[j]) << "tensor " << i << " written over " << j;
        ++in_place;
      }
      if (a.in_place_of == static_cast<int>(j) || b.in_place_of == static_cast<int>(i)) continue;
      const int64_t a0 = zoned.layout.offsets[i], b0 = zoned.layout.offsets[j];
      EXPECT_TRUE(a0 + a.bytes + kRedZone <= b0 || b0 + b.bytes + kRedZone <= a0) << "tensors " << i << " and " << j;
    }
  EXPECT_EQ(in_place, 1) << "the loss's gradient over the logits";
  EXPECT_THROW(lay_out(p, s, -1), std::invalid_argument);
  // plan_step pads every tensor and fits the padded layout into the budget.
  const models::ModelSpec spec = gpt2_bf16({2, 2, 64, 256, 32}, 2, 32);
  PlanRequest request;
  request.bucket_bytes = 16384;
  request.budget_bytes = int64_t(1) << 30;
  request.red_zone_bytes = kRedZone;
  const StepPlan plan = plan_step(spec, CostModel{}, request);
  EXPECT_EQ(plan.memory.red_zone_bytes, kRedZone);
  EXPECT_EQ(plan.memory.layout.peak, lay_out(plan.problem, plan.schedule, kRedZone).layout.peak);
}

TEST(Policies, RandomModelsBudgetsAndCostModels) {
  Rng rng(31);
  int greedy_runs = 0, offloading_runs = 0;
  for (int trial = 0; trial < 60; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    // Half the budgets lie where only offloading weights can fit, half anywhere up to all-resident and beyond.
    const OffloadProblem p = small_problem(rng, static_cast<int64_t>(rng.below(2) ? rng.below(250) : rng.below(1200)));
    std::map<Policy, SimResult> results;
    for (Policy policy : all_policies()) {
      try {
        const PlannedSchedule planned = make_schedule(p, policy);
        const SimResult r = simulate_planned(p, planned);
        ASSERT_EQ(r.error, "") << to_string(policy);
        ASSERT_TRUE(r.fits) << to_string(policy);
        ASSERT_LE(r.peak_device_bytes, p.budget_bytes) << to_string(policy);
        ASSERT_GE(r.step_s, r.lower_bound_s * (1 - 1e-9)) << to_string(policy);
        ASSERT_GE(r.step_s, lower_bound_step_s(p) * (1 - 1e-9)) << to_string(policy);
        results[policy] = r;
      } catch (const BudgetError& e) {
        EXPECT_NE(std::string(e.what()).find("offload.gpu_budget: "), std::string::npos) << e.what();
      }
    }
    // chunk-lru's policy tries smaller budgets than greedy's chunk-lru candidates: greedy must still fit.
    if (results.contains(Policy::ChunkLru)) {
      EXPECT_TRUE(results.contains(Policy::Greedy)) << "greedy fails where chunk-lru fits";
    }
    if (!results.contains(Policy::Greedy)) continue;
    ++greedy_runs;
    if (!results.contains(Policy::ZeroOffload)) {
      ++offloading_runs;  // only offloading weights fits: the case Ferry exists for
      EXPECT_GT(results[Policy::Greedy].offloaded_bytes, 0);
    }
  }
  EXPECT_GT(greedy_runs, 20);
  EXPECT_GT(offloading_runs, 5);
}

// Every CPU-AdamW policy's plan on 40 random problems (random budgets): visit(problem, policy, plan) for
// the plans that update some bucket on the CPU; the others (greedy chose resident) can neither delay nor
// pipeline. Returns how many were visited.
int for_each_cpu_adam_plan(uint64_t seed, const std::function<void(const OffloadProblem&, Policy, const PlannedSchedule&)>& visit) {
  Rng rng(seed);
  int visited = 0;
  for (int trial = 0; trial < 40; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const OffloadProblem p = small_problem(rng, static_cast<int64_t>(rng.below(1200)));
    for (Policy policy : {Policy::ZeroOffload, Policy::ChunkLru, Policy::Greedy}) {
      PlannedSchedule planned;
      try {
        planned = make_schedule(p, policy);
      } catch (const BudgetError&) {
        continue;
      }
      if (planned.schedule.all_device_optimizer()) {
        EXPECT_THROW(with_delayed_update(p, planned.schedule), std::invalid_argument);
        EXPECT_THROW(with_pipelined_update(planned.schedule), std::invalid_argument);
        continue;
      }
      SCOPED_TRACE(to_string(policy));
      visit(p, policy, planned);
      ++visited;
    }
  }
  return visited;
}

TEST(Policies, DelayedUpdateKeepsThePlacementAndNeverSlowsTheStep) {
  const int checked = for_each_cpu_adam_plan(44, [](const OffloadProblem& p, Policy, const PlannedSchedule& planned) {
    const Schedule& s = planned.schedule;
    const SimResult now = simulate_planned(p, planned);
    const Schedule d = with_delayed_update(p, s);
    const SimResult later = simulate(p, d, planned.memory);  // the layout stays valid: validate compares the tensors
    ASSERT_EQ(later.error, "");
    EXPECT_EQ(later.h2d_bytes, now.h2d_bytes);
    // AdamW leaves the critical path. With a device tier it may not: the tier's AdamW waits for the
    // decision, which the CPU's one worker takes after the pending updates.
    if (!s.any_device_optimizer()) {
      EXPECT_LE(later.step_s, now.step_s * (1 + 1e-9));
    }
    for (int b = 0; b < p.n_buckets; ++b) EXPECT_EQ(d.tier(b), s.tier(b)) << "bucket " << b;
    // Every upload right after the last op that uses its bucket.
    for (int point = 0; point <= p.n_ops; ++point)
      for (const Action& a : d.before[point])
        if (a.kind == Action::Kind::Upload) {
          for (int i = point; i < p.n_ops; ++i)
            EXPECT_EQ(std::count(p.op_buckets[i].begin(), p.op_buckets[i].end(), a.bucket), 0) << "op " << i;
        }
  });
  EXPECT_GT(checked, 30);
}

TEST(Policies, PipelinedUpdateIsNeverSlowerAndTheForwardWaitsForEveryUpdate) {
  int faster = 0;
  const int checked = for_each_cpu_adam_plan(45, [&](const OffloadProblem& p, Policy, const PlannedSchedule& planned) {
    const Schedule& s = planned.schedule;
    const SimResult now = simulate_planned(p, planned), pipelined = simulate(p, with_pipelined_update(s), planned.memory);
    ASSERT_EQ(pipelined.error, "");
    EXPECT_EQ(pipelined.h2d_bytes, now.h2d_bytes);
    // The next step's work only starts sooner.
    EXPECT_LE(pipelined.step_s, now.step_s * (1 + 1e-9));
    faster += pipelined.step_s < now.step_s * (1 - 1e-6);
    // The forward uses every bucket, so every CPU update (in first-use order) comes before the backward
    // pass's compute: the step holds both.
    const std::vector<int> order = cpu_update_order(p, with_pipelined_update(s));
    double updates = 0;
    for (int b : order) updates += double(p.bucket_params[b]) / p.cost.cpu_adam_params_per_s;
    const double backward = std::accumulate(p.op_seconds.begin() + p.forward_ops, p.op_seconds.end(), 0.0);
    EXPECT_GE(pipelined.step_s * (1 + 1e-9), updates + backward);
    auto first_use = [&](int b) {
      for (int op = 0; op < p.n_ops; ++op)
        if (std::count(p.op_buckets[op].begin(), p.op_buckets[op].end(), b) > 0) return op;
      return p.n_ops;
    };
    for (size_t i = 1; i < order.size(); ++i) EXPECT_LE(first_use(order[i - 1]), first_use(order[i])) << "update order " << i;
  });
  EXPECT_GT(checked, 30);
  EXPECT_GT(faster, 10);
}

TEST(Policies, GreedyPipelinedIsNeverSlowerThanGreedyUpdatingInTheStep) {
  Rng rng(46);
  int pipelined = 0;
  for (int trial = 0; trial < 60; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const OffloadProblem p = small_problem(rng, static_cast<int64_t>(rng.below(1200)), 1 + trial % 3);
    const bool mixed = trial % 2 == 0;
    try {
      const PlannedSchedule now = make_schedule(p, Policy::Greedy, 0, mixed);
      const PlannedSchedule later = make_schedule(p, Policy::Greedy, 0, mixed, Overlap::Pipelined);
      EXPECT_LE(simulate_planned(p, later).step_s, simulate_planned(p, now).step_s * (1 + 1e-9)) << later.schedule.label();
      EXPECT_EQ(later.schedule.pipelined_update, !later.schedule.all_device_optimizer());
      pipelined += later.schedule.pipelined_update;
    } catch (const BudgetError&) {
      EXPECT_THROW(make_schedule(p, Policy::Greedy, 0, mixed, Overlap::Pipelined), BudgetError);
    }
  }
  EXPECT_GT(pipelined, 10);
  // The workload where timing windows for the updates alone loses: GPT-2 1.5B's width (8 blocks), 4 x 1024
  // tokens accumulated 4 times, the shipped H100-class model, a budget holding part of AdamW's state.
  const CostModel h100 = CostModel::load(testing::source_path("configs/cost_models/h100-assumed.json"));
  const models::ModelSpec spec = gpt2_bf16({8, 25, 1600, 50257, 1024}, 4, 1024);
  for (const int gib : {3, 4}) {
    std::vector<bool> every_block(8, true);
    const OffloadProblem p(spec, h100, memory::BucketLayout::kDefaultBucketBytes, int64_t(gib) << 30, every_block, 4);
    const double now = simulate_planned(p, make_schedule(p, Policy::Greedy)).step_s;
    const double later = simulate_planned(p, make_schedule(p, Policy::Greedy, 0, true, Overlap::Pipelined)).step_s;
    std::printf("%d GiB: greedy %.4f s, pipelined %.4f s\n", gib, now, later);
    EXPECT_LE(later, now * (1 + 1e-9)) << gib << " GiB";
  }
}

// One backward op finishes four buckets' gradients at once; ten short ops follow. Their copies queue on
// the d2h stream (1 ms each, ops 0.6 ms), so the fourth lands 4 ms after the op: a release placed one
// copy time after it (as if each copy had the link to itself) made compute wait 2.2 ms there.
TEST(Policies, GradientReleasesWaitForTheCopiesQueuedBeforeThem) {
  models::ModelSpec spec;
  spec.kind = "queue";
  for (int i = 0; i < 5; ++i) spec.params.push_back({"p" + std::to_string(i), {1, 1024}});
  auto tensor = [&](const std::string& name, bool grad) {
    spec.tensors.push_back({name, {1, 1024}, DType::F32, grad, name == "x0"});
    return static_cast<int>(spec.tensors.size()) - 1;
  };
  const int x0 = tensor("x0", false), x1 = tensor("x1", false), x2 = tensor("x2", false), g2 = tensor("x2.grad", true);
  auto add_op = [&](std::string name, models::Pass pass, std::vector<int> params, std::vector<int> inputs, std::vector<int> outputs) {
    models::OpSpec& op = spec.ops.emplace_back();
    op.name = std::move(name), op.kind = models::OpKind::Linear, op.pass = pass;
    op.params = std::move(params), op.inputs = std::move(inputs), op.outputs = std::move(outputs);
  };
  add_op("f0", models::Pass::Forward, {4}, {x0}, {x1});
  add_op("f1", models::Pass::Forward, {0, 1, 2, 3}, {x1}, {x2});
  add_op("loss", models::Pass::Forward, {}, {x2}, {g2});
  int carried = tensor("x1.grad", true);
  add_op("b1", models::Pass::Backward, {0, 1, 2, 3}, {x1, g2}, {carried});
  for (int i = 0; i < 10; ++i) {
    const int next = tensor("tail" + std::to_string(i) + ".grad", true);
    add_op("t" + std::to_string(i), models::Pass::Backward, {}, {carried}, {next});
    carried = next;
  }
  add_op("b0", models::Pass::Backward, {4}, {x0, carried}, {});
  spec.finalize();
  spec.set_precision(DType::BF16);
  CostModel cost;
  cost.profiled_op_s.assign(spec.ops.size(), 0.6e-3);
  cost.d2h.gbps = 2048 / 1e-3 / 1e9, cost.d2h.latency_s = 0;  // a 2 KiB bucket's gradients take 1 ms
  const OffloadProblem p(spec, cost, 2048, int64_t(1) << 30);
  ASSERT_EQ(p.n_buckets, 5);
  const PlannedSchedule zero = make_schedule(p, Policy::ZeroOffload);
  const SimResult r = simulate_planned(p, zero);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.stall_s, 0.0) << "compute waited for a gradient buffer to be released";
  std::map<int, int> released_at;  // bucket -> point
  for (int point = 0; point <= p.n_ops; ++point)
    for (const Action& a : zero.schedule.before[point])
      if (a.kind == Action::Kind::ReleaseGrads) released_at[a.bucket] = point;
  std::vector<int> queued;  // the four buckets b1 finishes, in the order their copies queue
  for (const Action& a : zero.schedule.before[p.last_grad_op[p.op_buckets[1][0]] + 1])
    if (a.kind == Action::Kind::OffloadGrads) queued.push_back(a.bucket);
  ASSERT_EQ(queued.size(), 4u);
  EXPECT_LT(released_at[queued.front()], released_at[queued.back()]) << "each buffer is freed once its own copy has landed";
}

// The h2d stream is in order: an upload queued before the bucket the CPU updates first would hold back every
// upload behind it until its own update is done (GPT's buckets, by index, are updated last to first).
TEST(Policies, ResidentBucketsAreUploadedInTheOrderTheCpuUpdatesThem) {
  const CostModel h100 = CostModel::load(testing::source_path("configs/cost_models/h100-assumed.json"));
  const OffloadProblem p(gpt2_bf16({4, 12, 768, 50257, 1024}, 4, 1024), h100, memory::BucketLayout::kDefaultBucketBytes, int64_t(16) << 30);
  const PlannedSchedule zero = make_schedule(p, Policy::ZeroOffload);
  std::vector<int> uploads;
  for (const Action& a : zero.schedule.before[p.n_ops])
    if (a.kind == Action::Kind::Upload) uploads.push_back(a.bucket);
  ASSERT_GT(uploads.size(), 2u);
  EXPECT_EQ(uploads, cpu_update_order(p, zero.schedule));
  Schedule reversed = zero.schedule;  // the same uploads, last updated first
  std::erase_if(reversed.before[p.n_ops], [](const Action& a) { return a.kind == Action::Kind::Upload; });
  for (auto b = uploads.rbegin(); b != uploads.rend(); ++b) reversed.before[p.n_ops].push_back({Action::Kind::Upload, *b});
  EXPECT_LT(simulate_planned(p, zero).step_s, simulate(p, reversed, zero.memory).step_s);
}

TEST(Policies, MoreBudgetNeverMakesGreedySlower) {
  Rng rng(8);
  for (int trial = 0; trial < 50; ++trial) {
    const bool mixed = trial % 2 == 1;  // with and without the device tier beside the CPU's
    const OffloadProblem tight = small_problem(rng, 50);
    double previous = INFINITY;
    for (int64_t extra = 0; extra <= 24; extra += 2) {
      OffloadProblem p = tight;
      p.budget_bytes = tight.budget_bytes + extra * (tight.budget_bytes / 32);
      try {
        const double t = simulate_planned(p, make_schedule(p, Policy::Greedy, 0, mixed)).step_s;
        EXPECT_LE(t, previous * (1 + 1e-12)) << "trial " << trial << " budget +" << extra << "/32" << (mixed ? ", mixed tiers" : "");
        previous = t;
      } catch (const BudgetError&) {
        EXPECT_EQ(previous, INFINITY) << "greedy fit a smaller budget but not this one";
      }
    }
  }
}

TEST(Policies, GreedyIsResidentWhenEverythingFitsOnAnH100) {
  // On the shipped H100-class model, AdamW on the device beats any trip over PCIe: with a budget that
  // holds everything, greedy keeps everything resident, and says whose construction it adopted.
  const CostModel h100 = CostModel::load(testing::source_path("configs/cost_models/h100-assumed.json"));
  const models::ModelSpec spec = gpt2_bf16({4, 4, 256, 1024, 128}, 4, 128);
  const OffloadProblem p(spec, h100, 1 << 20, int64_t(1) << 40);
  const PlannedSchedule greedy = make_schedule(p, Policy::Greedy);
  EXPECT_TRUE(greedy.schedule.all_device_optimizer());
  EXPECT_EQ(greedy.schedule.policy, "greedy");
  EXPECT_EQ(greedy.schedule.label(), "greedy (resident schedule)");
  const PlannedSchedule resident = make_schedule(p, Policy::Resident);
  EXPECT_EQ(resident.schedule.label(), "resident");
  EXPECT_DOUBLE_EQ(simulate_planned(p, greedy).step_s, simulate_planned(p, resident).step_s);
}

TEST(Checkpointing, RecomputationJoinsTheTimelineAndShortensActivationLives) {
  Rng rng(4);
  const models::ModelSpec spec = gpt2_bf16({4, 2, 64, 256, 64}, 4, 64);
  int forward_block_ops = 0;
  for (const auto& op : spec.ops) forward_block_ops += op.pass == models::Pass::Forward && op.layer == 0;
  const CostModel cost = random_cost(rng);
  const OffloadProblem none(spec, cost, 16384, int64_t(1) << 40);
  const OffloadProblem all(spec, cost, 16384, int64_t(1) << 40, {true, true, true, true});
  EXPECT_EQ(all.n_ops, none.n_ops + 4 * forward_block_ops);
  EXPECT_EQ(all.checkpointed_layers, 4);
  EXPECT_EQ(all.n_layers, 4);
  EXPECT_LT(minimum_device_bytes(all), minimum_device_bytes(none));
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<bool> some(4);
    for (int l = 0; l < 4; ++l) some[l] = rng.below(2);
    OffloadProblem p(spec, random_cost(rng), 16384, int64_t(1) << 40, some);
    p.budget_bytes = minimum_device_bytes(p) + static_cast<int64_t>(rng.below(1 << 20));
    for (Policy policy : all_policies()) {
      try {
        const SimResult r = simulate_planned(p, make_schedule(p, policy));
        EXPECT_EQ(r.error, "") << to_string(policy);
        EXPECT_LE(r.peak_device_bytes, p.budget_bytes) << to_string(policy);
      } catch (const BudgetError&) {
      }
    }
  }
}

PlanRequest request_for(int64_t bucket, int64_t budget, Policy policy, Checkpointing checkpointing) {
  PlanRequest r;
  r.bucket_bytes = bucket;
  r.budget_bytes = budget;
  r.policy = policy;
  r.checkpointing = checkpointing;
  return r;
}

TEST(Checkpointing, AutoCheckpointsTheFewestBlocksThatFit) {
  Rng rng(6);
  const models::ModelSpec spec = gpt2_bf16({6, 2, 64, 256, 128}, 8, 128);
  const CostModel cost = random_cost(rng);
  const int64_t without = minimum_device_bytes(OffloadProblem(spec, cost, 16384, 1));
  const int64_t with_all = minimum_device_bytes(OffloadProblem(spec, cost, 16384, 1, std::vector<bool>(6, true)));
  ASSERT_LT(with_all * 1.3, without);  // activations dominate this shape
  const int64_t budget = (with_all + without) / 2;
  // Off does not fit; the error says recomputation would.
  try {
    plan_step(spec, cost, request_for(16384, budget, Policy::Greedy, Checkpointing::Off));
    ADD_FAILURE();
  } catch (const BudgetError& e) {
    EXPECT_NE(std::string(e.what()).find("0 of 6 blocks recomputed; raise it or set train.activation_checkpointing: auto"),
              std::string::npos) << e.what();
  }
  const StepPlan on = plan_step(spec, cost, request_for(16384, budget, Policy::Greedy, Checkpointing::On));
  EXPECT_EQ(on.problem.checkpointed_layers, 6);
  const StepPlan automatic = plan_step(spec, cost, request_for(16384, budget, Policy::Greedy, Checkpointing::Auto));
  EXPECT_GT(automatic.problem.checkpointed_layers, 0);
  EXPECT_LT(automatic.problem.checkpointed_layers, 6);
  const SimResult r = simulate_plan(automatic);
  EXPECT_EQ(r.error, "");
  EXPECT_LE(r.peak_device_bytes, budget);
  // One block fewer does not fit.
  std::vector<bool> fewer(6, false);
  std::fill(fewer.begin(), fewer.begin() + automatic.problem.checkpointed_layers - 1, true);
  EXPECT_THROW(make_schedule(OffloadProblem(spec, cost, 16384, budget, fewer), Policy::Greedy), BudgetError);
  // With no budget for even that, the error says what every block checkpointed would need, and advises
  // no more recomputation.
  try {
    plan_step(spec, cost, request_for(16384, with_all / 2, Policy::Greedy, Checkpointing::Auto));
    ADD_FAILURE();
  } catch (const BudgetError& e) {
    const std::string expected = "offload.gpu_budget: " + memory::format_bytes(with_all / 2) + " is below the " + memory::format_bytes(with_all) +
                                 " this model needs with every bucket offloaded and 6 of 6 blocks recomputed; raise it";
    EXPECT_EQ(std::string(e.what()), expected);
  }
}

TEST(Checkpointing, GreedyAutoIsNeverSlowerThanTheAnchorsAuto) {
  // Where recomputing a few blocks lets everything stay resident, that beats offloading without
  // recomputation, and greedy's auto checkpointing must find it: BERT-large, batch 32 x 512, 16 GiB on the
  // H100-class model, was such a case (greedy offloaded without recomputing: 0.216 s; resident with 6
  // blocks recomputed: 0.121 s). Also on a small GPT over random cost models and budgets.
  const CostModel h100 = CostModel::load(testing::source_path("configs/cost_models/h100-assumed.json"));
  struct Case {
    models::ModelSpec spec;
    CostModel cost;
    int64_t budget;
  };
  std::vector<Case> cases{{bert_bf16({24, 16, 1024, 30522, 512, 0}, 32, 512), h100, int64_t(16) << 30}};
  Rng rng(12);
  const models::ModelSpec gpt = gpt2_bf16({6, 2, 64, 256, 128}, 8, 128);
  for (int trial = 0; trial < 6; ++trial) {
    const CostModel cost = random_cost(rng);
    const int64_t all = minimum_device_bytes(OffloadProblem(gpt, cost, 16384, 1, std::vector<bool>(6, true)));
    cases.push_back({gpt, cost, static_cast<int64_t>(all * (1.2 + 0.4 * trial))});
  }
  for (const Case& c : cases) {
    const int64_t bucket = c.spec.kind == "bert" ? int64_t(32) << 20 : 16384;
    const StepPlan greedy = plan_step(c.spec, c.cost, request_for(bucket, c.budget, Policy::Greedy, Checkpointing::Auto));
    const double greedy_s = simulate_plan(greedy).step_s;
    for (Policy anchor : {Policy::Resident, Policy::ZeroOffload}) {
      try {
        const StepPlan other = plan_step(c.spec, c.cost, request_for(bucket, c.budget, anchor, Checkpointing::Auto));
        EXPECT_LE(greedy_s, simulate_plan(other).step_s * (1 + 1e-9))
            << c.spec.kind << ": " << to_string(anchor) << " at budget " << c.budget;
      } catch (const BudgetError&) {
      }
    }
  }
}

// The least device memory any policy needs holds, at the op that first writes a bucket's gradients, that
// bucket's weights (read) and its gradients (written) both, beside the op's other buckets and activations.
TEST(Budget, TheLeastDeviceMemoryHoldsABucketsWeightsAndGradientsAtItsFirstGradientOp) {
  Rng rng(23);
  for (const auto& [shape, bucket] : {std::pair(models::GptConfig{2, 2, 256, 256, 16}, int64_t(16384)),
                                      std::pair(models::GptConfig{1, 1, 128, 256, 16}, int64_t(65536))}) {
    const OffloadProblem p(gpt2_bf16(shape, 1, 16), random_cost(rng), bucket, int64_t(1) << 40);
    int checked = 0;
    for (int b = 0; b < p.n_buckets; ++b) {
      const int i = p.first_grad_op[b];
      if (i < 0) continue;
      int64_t held = p.workspace_bytes + p.activation_live[i] + p.bucket_bytes[b];  // its gradients
      for (int c : p.op_buckets[i]) held += p.bucket_bytes[c];                      // the op's weights
      EXPECT_GE(minimum_device_bytes(p), held) << "bucket " << b << " at op " << i;
      ++checked;
    }
    EXPECT_GT(checked, 1);
  }
}

TEST(Policies, ImpossibleBudgetSaysWhatIsNeededAndWhatToChange) {
  const models::ModelSpec spec = gpt2_bf16({2, 2, 64, 256, 32}, 2, 32);
  const OffloadProblem p(spec, CostModel{}, 16384, 1000);
  for (Policy policy : all_policies()) {
    try {
      make_schedule(p, policy);
      ADD_FAILURE() << to_string(policy);
    } catch (const BudgetError& e) {
      EXPECT_EQ(e.shortfall.needed_bytes, minimum_device_bytes(p));
      EXPECT_EQ(std::string(e.what()), "offload.gpu_budget: " + memory::format_bytes(1000) + " is below the " +
                                           memory::format_bytes(minimum_device_bytes(p)) +
                                           " this model needs with every bucket offloaded and 0 of 2 blocks recomputed; raise it or "
                                           "set train.activation_checkpointing: auto");
    }
  }
  // Resident alone does not fit where offloading would: the error points to greedy, and to recomputation
  // only where recomputing every block makes resident fit.
  const OffloadProblem roomy(spec, CostModel{}, 16384, int64_t(1) << 40);
  const OffloadProblem roomy_recomputed(spec, CostModel{}, 16384, int64_t(1) << 40, {true, true});
  const int64_t everything = make_schedule(roomy, Policy::Resident).memory.layout.peak;
  const int64_t recomputed = make_schedule(roomy_recomputed, Policy::Resident).memory.layout.peak;
  ASSERT_LT(recomputed, everything - 1);
  ASSERT_LE(minimum_device_bytes(roomy), recomputed - 1);
  for (const auto& [budget, advice] : {std::pair{everything - 1, true}, std::pair{recomputed - 1, false}}) {
    try {
      plan_step(spec, CostModel{}, request_for(16384, budget, Policy::Resident, Checkpointing::Off));
      ADD_FAILURE();
    } catch (const BudgetError& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.shortfall.needed_bytes, everything);
      EXPECT_NE(what.find(" policy resident needs with every bucket and AdamW's state on the device and 0 of 2 blocks recomputed"),
                std::string::npos) << what;
      EXPECT_NE(what.find(advice ? "raise it, set offload.policy: greedy or set train.activation_checkpointing: auto"
                                 : "raise it or set offload.policy: greedy"),
                std::string::npos) << what;
      EXPECT_EQ(what.find("train.activation_checkpointing") != std::string::npos, advice) << what;
    }
  }
}

TEST(PlanStep, OneLayoutPerPlanThatTheExecutorAndTheSimulatorShare) {
  Rng rng(9);
  const models::ModelSpec spec = gpt2_bf16({3, 2, 64, 256, 64}, 4, 64);
  for (int trial = 0; trial < 6; ++trial) {
    const CostModel cost = random_cost(rng);
    const int64_t least = minimum_device_bytes(OffloadProblem(spec, cost, 16384, 1));
    for (Policy policy : all_policies()) {
      try {
        const StepPlan plan = plan_step(spec, cost, request_for(16384, least * (1 + trial), policy, Checkpointing::Auto));
        const DeviceMemory again = lay_out(plan.problem, plan.schedule);
        EXPECT_EQ(plan.memory.layout.offsets, again.layout.offsets) << to_string(policy);  // the layout of this schedule
        EXPECT_EQ(memory::Planner::check(lifetimes(plan.memory.tensors), plan.memory.layout), "");
        const SimResult r = simulate_plan(plan);
        EXPECT_EQ(r.error, "");
        EXPECT_EQ(r.peak_device_bytes, plan.memory.layout.peak);
        EXPECT_LE(r.peak_device_bytes, plan.problem.budget_bytes);
      } catch (const BudgetError&) {
      }
    }
  }
}

// The device libraries' workspace: one tensor, last, alive the whole step, in the layout the Simulator
// takes its peak from, in the least memory any plan needs, and against the budget: a budget that fits the
// plan without it fails with it, and the error says how much of the need the workspace is.
TEST(PlanStep, TheLibrariesWorkspaceIsOneTensorCountedInThePeakAndTheBudget) {
  const models::ModelSpec spec = models::build_gpt2({2, 2, 64, 256, 32}, 2, 32);
  constexpr int64_t kWorkspace = int64_t(256) << 10;  // less than resident needs beyond the least any plan needs
  PlanRequest request = request_for(16384, int64_t(1) << 40, Policy::Resident, Checkpointing::Off);
  const StepPlan plain = plan_step(spec, CostModel{}, request);
  request.workspace_bytes = kWorkspace;
  const StepPlan with = plan_step(spec, CostModel{}, request);
  EXPECT_EQ(with.problem.workspace_bytes, kWorkspace);
  ASSERT_EQ(with.memory.tensors.size(), plain.memory.tensors.size() + 1);
  const DeviceTensor& w = with.memory.tensors.back();
  EXPECT_EQ(w.kind, DeviceTensor::Kind::Workspace);
  EXPECT_STREQ(to_string(w.kind), "workspace");
  EXPECT_EQ(w.life.bytes, kWorkspace);
  EXPECT_EQ(w.life.first, 0);
  EXPECT_EQ(w.life.last, with.problem.n_ops - 1);
  for (const DeviceTensor& t : plain.memory.tensors) EXPECT_NE(t.kind, DeviceTensor::Kind::Workspace);
  // The peak holds it beside everything alive at the busiest op, and the Simulator reports that peak.
  int64_t busiest = 0;
  for (int op = 0; op < plain.problem.n_ops; ++op) {
    int64_t live = 0;
    for (const DeviceTensor& t : plain.memory.tensors) live += t.life.first <= op && op <= t.life.last ? t.life.bytes : 0;
    busiest = std::max(busiest, live);
  }
  EXPECT_GE(with.memory.layout.peak, busiest + kWorkspace);
  EXPECT_EQ(simulate_plan(with).peak_device_bytes, with.memory.layout.peak);
  EXPECT_EQ(minimum_device_bytes(with.problem), minimum_device_bytes(plain.problem) + kWorkspace);
  // A budget resident fits without the workspace is too small with it.
  request.budget_bytes = plain.memory.layout.peak;
  ASSERT_LE(minimum_device_bytes(with.problem), request.budget_bytes);  // so resident's own check is the one that fails
  try {
    plan_step(spec, CostModel{}, request);
    ADD_FAILURE() << "the workspace was left out of the budget";
  } catch (const BudgetError& e) {
    EXPECT_EQ(e.shortfall.needed_bytes, with.memory.layout.peak) << e.what();
    EXPECT_EQ(e.shortfall.workspace_bytes, kWorkspace);
    EXPECT_NE(std::string(e.what()).find("(" + memory::format_bytes(kWorkspace) + " of it the device libraries' workspace)"),
              std::string::npos) << e.what();
  }
  // Below the least any plan needs with it, every policy refuses before planning, counting it.
  for (Policy policy : all_policies()) {
    const PlanRequest tight = [&] {
      PlanRequest r = request_for(16384, minimum_device_bytes(with.problem) - 1, policy, Checkpointing::Off);
      r.workspace_bytes = kWorkspace;
      return r;
    }();
    try {
      plan_step(spec, CostModel{}, tight);
      ADD_FAILURE() << to_string(policy);
    } catch (const BudgetError& e) {
      EXPECT_EQ(e.shortfall.needed_bytes, minimum_device_bytes(with.problem)) << to_string(policy);
      EXPECT_NE(std::string(e.what()).find("of it the device libraries' workspace"), std::string::npos) << e.what();
    }
  }
  // Greedy offloading under a budget that holds the workspace: its own accounting counts it, so its plan fits.
  request.policy = Policy::Greedy;
  request.budget_bytes = (minimum_device_bytes(with.problem) + plain.memory.layout.peak + kWorkspace) / 2;
  const StepPlan greedy = plan_step(spec, CostModel{}, request);
  const SimResult r = simulate_plan(greedy);
  EXPECT_EQ(r.error, "");
  EXPECT_TRUE(r.fits);
  EXPECT_LE(r.peak_device_bytes, request.budget_bytes);
  EXPECT_EQ(greedy.memory.tensors.back().kind, DeviceTensor::Kind::Workspace);
  EXPECT_THROW(OffloadProblem(spec, CostModel{}, 16384, 1 << 30, {}, 1, -1), std::invalid_argument);
}

TEST(PlanStep, OneRuleDecidesWhichOverlapAPolicyAllows) {
  const models::ModelSpec spec = gpt2_bf16({2, 2, 64, 256, 32}, 2, 32);
  const CostModel h100 = CostModel::load(testing::source_path("configs/cost_models/h100-assumed.json"));
  PlanRequest request = request_for(16384, int64_t(1) << 40, Policy::Resident, Checkpointing::Off);
  request.overlap = Overlap::Delayed;
  EXPECT_FALSE(overlap_allowed(Policy::Resident, Overlap::Delayed));
  try {
    plan_step(spec, h100, request);
    ADD_FAILURE();
  } catch (const BudgetError& e) {
    ADD_FAILURE() << e.what();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("offload.overlap"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("offload.policy: resident"), std::string::npos) << e.what();
  }
  // zero-offload: the delayed update, applied by plan_step.
  request.policy = Policy::ZeroOffload;
  const StepPlan zero = plan_step(spec, h100, request);
  EXPECT_TRUE(zero.schedule.delayed_update);
  EXPECT_EQ(zero.overlap_note, "");
  EXPECT_EQ(simulate_plan(zero).error, "");
  // greedy with everything fitting: AdamW on the device for every bucket, or for most of them with a few
  // buckets whose CPU AdamW hides behind the next step's compute; never slower than resident. A plan that
  // does not delay says why.
  request.policy = Policy::Greedy;
  const StepPlan greedy = plan_step(spec, h100, request);
  ASSERT_EQ(simulate_plan(greedy).error, "");
  EXPECT_TRUE(greedy.schedule.any_device_optimizer());
  EXPECT_EQ(greedy.schedule.delayed_update, greedy.overlap_note.empty()) << greedy.overlap_note;
  request.policy = Policy::Resident, request.overlap = Overlap::Backward;
  EXPECT_LE(simulate_plan(greedy).step_s, simulate_plan(plan_step(spec, h100, request)).step_s);
  // A plan that cannot delay anything says so, naming itself.
  request.budget_bytes = int64_t(1) << 40, request.policy = Policy::Greedy, request.overlap = Overlap::Delayed, request.mixed_tiers = false;
  const StepPlan resident_only = plan_step(spec, h100, request);
  if (resident_only.schedule.all_device_optimizer()) {
    EXPECT_NE(resident_only.overlap_note.find("greedy (resident schedule)"), std::string::npos) << resident_only.overlap_note;
  }
  EXPECT_EQ(parse_overlap("delayed"), Overlap::Delayed);
  EXPECT_THROW(parse_overlap("later"), std::invalid_argument);
}

// ---- Greedy and the lower bound against an exhaustive search ----

// A chain small enough to search exhaustively: n forward ops (op i reads x_i, writes x_{i+1} and uses
// parameter i), a loss, and the backward ops in reverse; sometimes a tied parameter that the first and the
// last forward op share (GPT-2's wte and lm_head). Every parameter gets a bucket of its own. Op times,
// link, CPU and device AdamW rates are drawn relative to the compute time so that no one part dominates.
OffloadProblem chain_problem(Rng& rng, int n, bool tied) {
  models::ModelSpec spec;
  spec.kind = "chain";
  const int n_params = n + (tied ? 1 : 0);
  for (int i = 0; i < n_params; ++i) spec.params.push_back({"p" + std::to_string(i), {int64_t(1 + rng.below(6)), 1024}});
  for (int i = 0; i <= n; ++i) spec.tensors.push_back({"x" + std::to_string(i), {int64_t(1 + rng.below(8)), 1024}, DType::F32, false, i == 0});
  for (int i = 1; i <= n; ++i) spec.tensors.push_back({"g" + std::to_string(i), spec.tensors[i].shape, DType::F32, true, false});
  auto grad = [&](int i) { return n + i; };  // g_i's tensor index
  auto params_of = [&](int i) {
    std::vector<int> ps{i};
    if (tied && (i == 0 || i == n - 1)) ps.push_back(n);
    return ps;
  };
  auto add_op = [&](std::string name, models::Pass pass, std::vector<int> params, std::vector<int> inputs, std::vector<int> outputs) {
    models::OpSpec& op = spec.ops.emplace_back();
    op.name = std::move(name);
    op.kind = models::OpKind::Linear;
    op.pass = pass;
    op.params = std::move(params), op.inputs = std::move(inputs), op.outputs = std::move(outputs);
  };
  for (int i = 0; i < n; ++i) add_op("f" + std::to_string(i), models::Pass::Forward, params_of(i), {i}, {i + 1});
  add_op("loss", models::Pass::Forward, {}, {n}, {grad(n)});
  for (int i = n - 1; i >= 0; --i)
    add_op("b" + std::to_string(i), models::Pass::Backward, params_of(i), {i, grad(i + 1)}, i > 0 ? std::vector<int>{grad(i)} : std::vector<int>{});
  spec.finalize();
  spec.set_precision(DType::BF16);
  CostModel c;
  double compute = 0;
  for (size_t i = 0; i < spec.ops.size(); ++i) compute += c.profiled_op_s.emplace_back(1e-6 * double(5 + rng.below(200)));
  const double weight_bytes = double(spec.param_count()) * double(dtype_bytes(spec.precision)), params = double(spec.param_count());
  auto share = [&](int lo, int hi) { return compute * double(lo + rng.below(hi - lo + 1)) / 10; };  // lo/10 .. hi/10 of compute
  c.h2d.gbps = weight_bytes / share(2, 30) / 1e9;
  c.d2h.gbps = weight_bytes / share(2, 30) / 1e9;
  c.h2d.latency_s = c.d2h.latency_s = 1e-6 * double(rng.below(10));
  c.cpu_adam_params_per_s = params / share(1, 20);
  c.cpu_norm_params_per_s = 7 * c.cpu_adam_params_per_s;
  c.device_adam_params_per_s = params / share(1, 30);
  return OffloadProblem(spec, c, 1024, int64_t(1) << 40);
}

// The search space, for one problem. For every set of buckets kept resident and every subset of it
// updated on the device (the device tier; AdamW after the last op), every other bucket travels, AdamW on
// the CPU with the actions add_cpu_optimizer adds, as in every CPU-optimizer policy; then every split of each travelling
// bucket's uses into windows of consecutive uses, and for each window every point at which its prefetch
// could be issued: from the point its previous window is released (op 0 for the first) up to the window's
// first use. A window is waited for at its first use and released right after its last. Within a point:
// releases first, then the CPU optimizer's actions, then prefetches in the order of their windows' first
// use, then waits (greedy's order). Every bucket in the device tier is policy resident's schedule.
// It does not enumerate chunk-lru's per-op fetches with eviction, other orders of prefetches within a
// point, nor other points for the gradient offloads and releases. "Optimum": the fastest schedule of this
// space that fits the budget.
class ExhaustiveSearch {
 public:
  explicit ExhaustiveSearch(const OffloadProblem& p) : p_(p), uses_(p.n_buckets) {
    for (int i = 0; i < p.n_ops; ++i)
      for (int b : p.op_buckets[i]) uses_[b].push_back(i);
  }

  // Schedules in the space; to skip problems too large to search.
  double size() const {
    double n = 1;
    for (int b = 0; b < p_.n_buckets; ++b) {
      double travelling = 0;
      for_each_split(b, [&](const std::vector<Window>& w) { travelling += prefetch_choices(w); });
      n *= 2 + travelling;  // resident (updated on the device or by the CPU), or travelling
    }
    return n;
  }

  // Calls visit(step_s) for every valid schedule of the space that fits the budget.
  void run(const std::function<void(const Schedule&, const SimResult&)>& visit) {
    visit_ = &visit;
    for (uint32_t set = 0; set < (1u << p_.n_buckets); ++set) {
      resident_.assign(p_.n_buckets, false);
      for (int b = 0; b < p_.n_buckets; ++b) resident_[b] = (set >> b) & 1;
      for (uint32_t updated_there = set;; updated_there = (updated_there - 1) & set) {  // every subset, the empty one last
        device_.assign(p_.n_buckets, false);
        for (int b = 0; b < p_.n_buckets; ++b) device_[b] = (updated_there >> b) & 1;
        windows_.clear();
        choose(0);
        if (updated_there == 0) break;
      }
    }
  }

 private:
  struct Window {
    int bucket, first, last, prefetch = 0;
  };

  // Every split of bucket b's uses into windows of consecutive uses.
  void for_each_split(int b, const std::function<void(const std::vector<Window>&)>& f) const {
    const std::vector<int>& u = uses_[b];
    if (u.empty()) return f({});
    for (uint32_t cuts = 0; cuts < (1u << (u.size() - 1)); ++cuts) {
      std::vector<Window> w{{b, u[0], u[0]}};
      for (size_t k = 1; k < u.size(); ++k) {
        if ((cuts >> (k - 1)) & 1) w.push_back({b, u[k], u[k]});
        else w.back().last = u[k];
      }
      f(w);
    }
  }
  static double prefetch_choices(const std::vector<Window>& w) {
    double n = 1;
    for (size_t k = 0; k < w.size(); ++k) n *= w[k].first - (k == 0 ? 0 : w[k - 1].last + 1) + 1;
    return n;
  }

  // Windows and prefetch points for the travelling buckets from b on, then the schedule.
  void choose(int b) {
    if (b == p_.n_buckets) return evaluate(build());
    if (resident_[b]) return choose(b + 1);
    for_each_split(b, [&](const std::vector<Window>& split) { place(b, split, 0); });
  }
  void place(int b, std::vector<Window> split, size_t k) {
    if (k == split.size()) {
      const size_t mark = windows_.size();
      windows_.insert(windows_.end(), split.begin(), split.end());
      choose(b + 1);
      windows_.resize(mark);
      return;
    }
    for (int point = k == 0 ? 0 : split[k - 1].last + 1; point <= split[k].first; ++point) {
      split[k].prefetch = point;
      place(b, split, k + 1);
    }
  }

  Schedule build() const {
    Schedule s;
    s.policy = "search";
    s.construction = "searched schedule";
    s.before.resize(p_.n_ops + 1);
    s.resident = resident_;
    s.device_optimizer = device_;
    if (std::find(device_.begin(), device_.end(), true) != device_.end()) s.before[p_.n_ops].push_back({Action::Kind::DeviceAdam, -1});
    add_cpu_optimizer(p_, s);
    std::vector<Window> order = windows_;
    std::stable_sort(order.begin(), order.end(), [](const Window& a, const Window& b) { return a.first < b.first; });
    for (const Window& w : order) {
      auto& at = s.before[w.last + 1];
      at.insert(at.begin(), {Action::Kind::Release, w.bucket});
    }
    for (const Window& w : order) {
      s.before[w.prefetch].push_back({Action::Kind::Prefetch, w.bucket});
      s.before[w.first].push_back({Action::Kind::Wait, w.bucket});
    }
    for (auto& actions : s.before)  // waits last
      std::stable_partition(actions.begin(), actions.end(), [](const Action& a) { return a.kind != Action::Kind::Wait; });
    return s;
  }

  void evaluate(const Schedule& s) {
    const SimResult r = simulate(p_, s, lay_out(p_, s));
    ASSERT_EQ(r.error, "") << "the search built an invalid schedule";
    if (r.fits) (*visit_)(s, r);
  }

  const OffloadProblem& p_;
  std::vector<std::vector<int>> uses_;  // per bucket, the ops using it
  std::vector<bool> resident_, device_;
  std::vector<Window> windows_;
  const std::function<void(const Schedule&, const SimResult&)>* visit_ = nullptr;
};

TEST(Greedy, WithinAFactorOfTheExhaustiveOptimumAndTheBoundBelowEverySchedule) {
  // Greedy / optimum, worst over these 200 problems as measured: 1.288 (greedy picks one window gap for
  // every bucket of a candidate, where the optimum merges one bucket's uses and splits another's; and its
  // resident sets are prefixes of one ranking); 1.288 too with the device tier in both. More problems find worse: 1.335 over 200 problems of up to
  // 100000 schedules. The bound leaves room for a change that loses a little, not for one that loses a lot.
  constexpr double kWorstAllowed = 1.32;
  constexpr int kProblems = 200;
  constexpr double kLargestSpace = 20000;  // schedules in a problem's space; larger problems are skipped
  Rng rng(2024);
  const auto start = std::chrono::steady_clock::now();
  double worst = 0;
  int searched = 0, offloading = 0;
  for (int trial = 0; searched < kProblems && trial < 10 * kProblems; ++trial) {
    OffloadProblem p = chain_problem(rng, 2 + static_cast<int>(rng.below(4)), rng.below(2) == 1);
    ExhaustiveSearch search(p);
    if (search.size() > kLargestSpace) continue;
    const int64_t least = minimum_device_bytes(p), everything = make_schedule(p, Policy::Resident).memory.layout.peak;
    p.budget_bytes = least + static_cast<int64_t>(double(everything - least) * rng.uniform() * 1.4);
    SCOPED_TRACE("trial " + std::to_string(trial) + ", budget " + std::to_string(p.budget_bytes));
    const double bound = lower_bound_step_s(p), delayed_bound = lower_bound_step_s(p, Overlap::Delayed);
    const double pipelined_bound = lower_bound_step_s(p, Overlap::Pipelined);
    double optimum = INFINITY, delayed_optimum = INFINITY, pipelined_optimum = INFINITY;
    Schedule best;
    int beaten = 0, delayed_beaten = 0, pipelined_beaten = 0;  // valid fitting schedules faster than the lower bound
    search.run([&](const Schedule& s, const SimResult& r) {
      beaten += r.step_s * (1 + 1e-9) < bound;
      if (r.step_s < optimum) optimum = r.step_s, best = s;
      // The same placement with the delayed and the pipelined update, for their bounds (resident does not
      // update on the CPU).
      const double delayed_s = s.all_device_optimizer() ? r.step_s : estimate(p, with_delayed_update(p, s)).step_s;
      delayed_beaten += delayed_s * (1 + 1e-9) < delayed_bound;
      delayed_optimum = std::min(delayed_optimum, delayed_s);
      const double pipelined_s = s.all_device_optimizer() ? r.step_s : estimate(p, with_pipelined_update(s)).step_s;
      pipelined_beaten += pipelined_s * (1 + 1e-9) < pipelined_bound;
      pipelined_optimum = std::min(pipelined_optimum, pipelined_s);
    });
    EXPECT_LE(pipelined_bound, bound * (1 + 1e-12));
    EXPECT_EQ(pipelined_beaten, 0) << "the pipelined lower bound " << pipelined_bound << " s exceeds pipelined schedules, the fastest "
                                   << pipelined_optimum << " s";
    EXPECT_EQ(beaten, 0) << "the lower bound " << bound << " s exceeds valid fitting schedules, the fastest " << optimum << " s ("
                         << best.label() << ")";
    EXPECT_EQ(delayed_beaten, 0) << "the delayed lower bound " << delayed_bound << " s exceeds delayed schedules, the fastest "
                                 << delayed_optimum << " s";
    if (optimum == INFINITY) continue;  // nothing in the space fits: nothing to compare
    ++searched;
    try {
      const PlannedSchedule greedy = make_schedule(p, Policy::Greedy, 0, true);
      const double greedy_s = simulate_planned(p, greedy).step_s;
      worst = std::max(worst, greedy_s / optimum);
      EXPECT_LE(greedy_s, kWorstAllowed * optimum) << greedy.schedule.label();
      offloading += !greedy.schedule.any_device_optimizer() && greedy.schedule.construction != "zero-offload schedule";
    } catch (const BudgetError& e) {
      ADD_FAILURE() << "greedy finds no plan where the search finds one: " << e.what();
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("greedy / exhaustive optimum: worst %.4f over %d problems (%d plans offload weights), %.1f s\n", worst,
              searched, offloading, seconds);
  EXPECT_GT(worst, 1.0);  // the search finds better plans than greedy's: it searches
  EXPECT_EQ(searched, kProblems);
  EXPECT_GT(offloading, 5);
}

TEST(Greedy, WithinTenPercentOfTheBoundWhenTheBudgetHoldsPartOfTheOptimizer) {
  // The workload issue 16 is judged on, scaled down to run in a test: GPT-2 1.5B's and GPT 3B's widths (8
  // and 4 blocks, GPT-2's vocabulary), 4 x 1024 tokens, the shipped H100-class model, budgets holding part of
  // AdamW's state. Greedy has to fill the budget with the device tier to the last bucket and keep the tied
  // embedding (read by the step's first op and by the head) there: grown only within ladder rungs it stayed
  // 1.15x-1.18x above. Behind the device tier's blocks the streamed ones are link-bound: their copies must
  // start during the device tier's forward (PrefetchTiming's LatestStart), or 1.5B's width at 4 GiB stays
  // 1.050 above, 3B's 1.116 at 4 GiB and 1.100 at 5; and the gradient buffers must be released once their
  // copies have landed behind the ones queued before them, or 3B's stays 1.081 at 4 GiB. Where the device tier
  // fills the budget, its streamed buckets' copies must be built within a rung just above the tier's own need:
  // built for unlimited memory, 3B's tier of 10 buckets overflows 4 GiB by 8 MB, and within the ladder's
  // highest rung below the budget (3.81 GiB, under the tier's 3.91) each copy is issued at its first use, so
  // greedy kept 9 buckets (1.066).
  // The rest is not greedy's to take. The bound's device tier holds any number of parameters; a plan's holds
  // whole tensors (a bucket never splits one, whatever offload.bucket_mb), and at 4 GiB the tier's next bucket
  // (1.5B: an MLP weight of 10.2M parameters; 3B: one of 26.2M) needs 4.047 and 4.249 GiB with every copy at its
  // first use. The bound with greedy's tier is 1.040 and 1.031 times the bound; the rest is 1.5B's recomputation
  // waiting 0.28 ms for its weights, and 3B's forward waiting 1.2 ms for the streamed blocks after the device
  // tier's (the link cannot bring them sooner from the step's start; the bound counts the link's bytes, not when
  // they are needed).
  const CostModel h100 = CostModel::load(testing::source_path("configs/cost_models/h100-assumed.json"));
  struct Case {
    models::GptConfig shape;
    int gib;
    // greedy / bound, a little above what was measured: 1.0446, 1.0248, 1.0430, 1.0198 (1.015, 1.068, 1.042, 1.020
    // before the loss's gradient took the logits' memory: that room moved the bound's limit on the device tier
    // from the loss to the end of backward, where the tier's next tensor no longer fits)
    double allowed;
  };
  for (const Case& c : {Case{{8, 25, 1600, 50257, 1024}, 4, 1.05}, Case{{8, 25, 1600, 50257, 1024}, 5, 1.03},
                        Case{{4, 32, 2560, 50257, 1024}, 4, 1.05}, Case{{4, 32, 2560, 50257, 1024}, 5, 1.025}}) {
    const models::ModelSpec spec = gpt2_bf16(c.shape, 4, 1024);
    PlanRequest request;
    request.budget_bytes = int64_t(c.gib) << 30;
    request.checkpointing = Checkpointing::Auto;
    const StepPlan plan = plan_step(spec, h100, request);
    const double step = simulate(plan.problem, plan.schedule, plan.memory).step_s, bound = lower_bound_step_s(spec, h100, request);
    const TierTotals tiers = tier_totals(plan.problem, plan.schedule);
    SCOPED_TRACE("width " + std::to_string(c.shape.n_embd) + ", " + std::to_string(c.gib) + " GiB: " + plan.schedule.label());
    EXPECT_GT(tiers.params[int(Tier::Device)], 0);
    EXPECT_GT(tiers.params[int(Tier::Streamed)], 0);  // the budget holds part of the optimizer state only
    EXPECT_LE(step, c.allowed * bound);
  }
}

// The planner's parallel parts decide as a loop does: in_parallel gives f(i) at index i and rethrows the lowest
// index's exception however the calls finish (here on a thread each, the later the index, the sooner it
// finishes), and so does a loop (an empty ParallelFor); ComputedOnce computes a key's value once while eight
// threads ask for it at once.
TEST(InParallel, ResultsAndTheFirstErrorInIndexOrderHoweverTheyFinish) {
  const ParallelFor thread_each = [](size_t n, const std::function<void(size_t)>& body) {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < n; ++i) threads.emplace_back(body, i);
    for (std::thread& t : threads) t.join();
  };
  auto later_ones_first = [](size_t i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2 * (8 - int(i))));
    return int(i) * 10;
  };
  for (const ParallelFor& parallel : {thread_each, ParallelFor{}}) {
    EXPECT_EQ(detail::in_parallel(parallel, 8, later_ones_first), (std::vector<int>{0, 10, 20, 30, 40, 50, 60, 70}));
    try {
      detail::in_parallel(parallel, 8, [&](size_t i) {
        if (i % 3 == 2) throw std::runtime_error("index " + std::to_string(i));
        return later_ones_first(i);
      });
      ADD_FAILURE() << "in_parallel threw nothing";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "index 2");
    }
  }
  detail::ComputedOnce<int, int, std::hash<int>> once;
  std::atomic<int> computed = 0;
  const std::vector<int> got = detail::in_parallel(thread_each, 8, [&](size_t) {
    return once.get(7, [&] {
      ++computed;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return 49;
    });
  });
  EXPECT_EQ(got, std::vector<int>(8, 49));
  EXPECT_EQ(computed.load(), 1);
}

}  // namespace
}  // namespace ferry::offload
