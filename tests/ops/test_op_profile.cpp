// Start-up profiling of a model's ops on a device (the host device here): which op stands for which, every
// op timed in one op's memory, the median of its passes, and passes until the step's time settles.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/device/host_device.h"
#include "engine/ops/op_profile.h"
#include "memory/planner.h"
#include "models/gpt2.h"

namespace ferry::ops {
namespace {

using device::HostDevice;

// An op is timed in place of another only where both run the same kernels on operands of the same shapes:
// the same op of another block, or a LayerNorm or residual add of the same width; three blocks profile about
// one block's.
TEST(OpProfile, AnOpIsTimedInPlaceOfOnlyAnOpOfTheSameShapes) {
  const models::ModelSpec spec = models::build_gpt2({3, 2, 64, 512, 32}, 4, 32);
  const std::vector<int> rep = ops_profiled_in_place_of(spec);
  ASSERT_EQ(rep.size(), spec.ops.size());
  auto shapes = [&spec](const std::vector<int>& tensors) {
    std::vector<models::Shape> out;
    for (int t : tensors) out.push_back(spec.tensors[t].shape);
    return out;
  };
  int timed = 0;
  for (size_t i = 0; i < spec.ops.size(); ++i) {
    const models::OpSpec& op = spec.ops[i];
    const models::OpSpec& by = spec.ops[static_cast<size_t>(rep[i])];
    timed += rep[i] == static_cast<int>(i);
    ASSERT_LE(rep[i], static_cast<int>(i)) << op.name;
    EXPECT_EQ(by.kind, op.kind) << op.name;
    EXPECT_EQ(by.pass, op.pass) << op.name;
    EXPECT_EQ(shapes(by.inputs), shapes(op.inputs)) << op.name;
    EXPECT_EQ(shapes(by.outputs), shapes(op.outputs)) << op.name;
    EXPECT_EQ(by.params.size(), op.params.size()) << op.name;
    for (size_t k = 0; k < std::min(by.params.size(), op.params.size()); ++k)
      EXPECT_EQ(spec.params[by.params[k]].shape, spec.params[op.params[k]].shape) << op.name;
    EXPECT_EQ(by.attrs.in, op.attrs.in) << op.name;
    EXPECT_EQ(by.attrs.out, op.attrs.out) << op.name;
    if (op.kind == models::OpKind::Linear && op.layer < 0) {
      EXPECT_EQ(rep[i], static_cast<int>(i)) << op.name << ": the head is its own";
    }
  }
  EXPECT_LT(timed * 2, static_cast<int>(spec.ops.size())) << "three blocks profile about one block's ops";
}

// Profiling runs every op of the step on the device in an arena that holds one op's operands, not a step's
// activations, and gives each op a positive time; the big matmul of the LM head takes longer than a
// residual add.
TEST(OpProfile, EveryOpIsTimedOnTheDeviceInOneOpsMemory) {
  for (DType precision : {DType::F32, DType::BF16}) {
    models::ModelSpec spec = models::build_gpt2({2, 2, 64, 512, 32}, 4, 32);
    spec.set_precision(precision);
    const int64_t arena = profile_arena_bytes(spec);
    EXPECT_LT(arena, memory::Planner::plan(spec.tensor_lifetimes()).peak / 2);  // no whole step of activations
    HostDevice dev({arena, 0, 0, nullptr});
    std::vector<int32_t> tokens(4 * 32), targets(4 * 32);
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = static_cast<int32_t>(i % 512), targets[i] = static_cast<int32_t>((i * 7) % 512);
    const std::vector<double> op_s = profile_ops(spec, dev, tokens, targets, {.min = 2, .min_seconds = 0, .max = 2});
    ASSERT_EQ(op_s.size(), spec.ops.size());
    for (size_t i = 0; i < op_s.size(); ++i) {
      EXPECT_GT(op_s[i], 0.0) << spec.ops[i].name;
      EXPECT_LT(op_s[i], 1.0) << spec.ops[i].name;
    }
    auto time_of = [&](const std::string& name) {
      const auto op =
          std::find_if(spec.ops.begin(), spec.ops.end(), [&](const models::OpSpec& o) { return o.name == name; });
      EXPECT_NE(op, spec.ops.end()) << name;
      return op_s[static_cast<size_t>(op - spec.ops.begin())];
    };
    EXPECT_GT(time_of("lm_head.bwd"), time_of("h.0.res_1.fwd")) << to_string(precision);
    EXPECT_EQ(time_of("h.1.attn.c_attn.bwd"), time_of("h.0.attn.c_attn.bwd"))
        << "a later block's op takes the first block's time";
    // A sample batch that is not the step's size is refused, naming both.
    EXPECT_THROW(profile_ops(spec, dev, std::vector<int32_t>(5, 0), std::vector<int32_t>(5, 0),
                             {.min = 1, .min_seconds = 0, .max = 1}),
                 std::invalid_argument);
    dev.synchronize();
  }
}

// An op's profiled time is the median of its passes, not the fastest: one pass that ran alone on the cores
// does not set the prediction of a step measured as a median.
TEST(OpProfile, AnOpsTimeIsTheMedianOfItsPasses) {
  EXPECT_DOUBLE_EQ(median_seconds({3e-3, 1e-3, 2e-3}), 2e-3);
  EXPECT_DOUBLE_EQ(median_seconds({4e-3, 1e-3, 2e-3, 3e-3}), 2.5e-3);
  EXPECT_DOUBLE_EQ(median_seconds({5e-3}), 5e-3);
  EXPECT_THROW(median_seconds({}), std::invalid_argument);
}

// A fake machine for settled_op_seconds: three ops (the first two stand for four each, as a block's ops do),
// each pass timed at its true time within 2%, except that a quarter of the samples, at random, caught the
// cores taken and took 2 to 30 times as long.
struct BusyMachine {
  std::vector<double> truth{1e-3, 5e-3, 2e-4};
  std::vector<int> weights{4, 4, 1};
  std::mt19937 rng;
  std::vector<double> pass() {
    std::uniform_real_distribution<double> u(0, 1);
    std::vector<double> seconds;
    for (double t : truth) seconds.push_back(t * (1 + 0.02 * u(rng)) * (u(rng) < 0.25 ? 2 + 28 * u(rng) : 1));
    return seconds;
  }
};

// Start-ups of the same model on a busy machine settle on the same step: the median of as many passes as it
// takes, where a few passes' median moved with every start-up. Of 200 start-ups here, one at most is more than
// 5% off the true step (stopping at the first agreement of the halves: 5; after the minimum of six passes: 68).
TEST(OpProfile, StartUpsOnABusyMachineSettleOnTheSameStep) {
  int off = 0;
  std::string which;
  for (unsigned seed = 1; seed <= 200; ++seed) {
    BusyMachine m{.rng = std::mt19937(seed)};
    int ran = 0;
    const std::vector<double> op_s = settled_op_seconds(
        m.weights, {.min_seconds = 0.05}, [&] { return m.pass(); }, &ran);
    ASSERT_EQ(op_s.size(), m.truth.size());
    double step = 0, truth = 0;
    for (size_t k = 0; k < op_s.size(); ++k) step += m.weights[k] * op_s[k], truth += m.weights[k] * m.truth[k];
    if (std::abs(step / truth - 1) > 0.05)
      ++off, which += " seed " + std::to_string(seed) + " (" + std::to_string(ran) + " passes)";
  }
  EXPECT_LE(off, 1) << "more than 5% off the true step:" << which;
}

// On a quiet machine profiling stops at its minimum; on one whose speed keeps swinging, at its time cap; a
// pass longer than the cap is enough alone.
TEST(OpProfile, PassesStopWhenSettledOrAtTheCap) {
  const std::vector<int> weights{1, 2};
  int ran = 0;
  settled_op_seconds(
      weights, {.min = 6, .min_seconds = 0},
      [] {
        return std::vector<double>{1e-3, 2e-3};
      },
      &ran);
  EXPECT_EQ(ran, 6);
  settled_op_seconds(
      weights, {.min = 6, .min_seconds = 0.03},
      [] {
        return std::vector<double>{1e-3, 2e-3};
      },
      &ran);
  EXPECT_EQ(ran, 10) << "3 ms of timed ops a pass";
  int calls = 0;
  const auto swinging = [&] {  // every other pass three times as long: the halves never agree
    const double f = ++calls % 2 ? 1.0 : 3.0;
    return std::vector<double>{0.1 * f, 0.1 * f};
  };
  const std::vector<double> op_s = settled_op_seconds(weights, {.max_seconds = 1.7}, swinging, &ran);
  EXPECT_EQ(ran, 5) << "0.2 s, 0.6 s, 0.2 s, ...: 1.8 s of timed ops after five passes, fewer than the minimum's six";
  EXPECT_DOUBLE_EQ(op_s[0], 0.1) << "the median of 0.1 0.3 0.1 0.3 0.1";
  settled_op_seconds(
      weights, {.max_seconds = 2.0},
      [] {
        return std::vector<double>{3.0, 1.0};
      },
      &ran);
  EXPECT_EQ(ran, 1);
  EXPECT_THROW(settled_op_seconds(weights, {}, [] { return std::vector<double>{1.0}; }), std::logic_error);
}

}  // namespace
}  // namespace ferry::ops
