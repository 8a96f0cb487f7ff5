// The host device: streams ordered only by events, throttled copies that take the link's time, a failed
// task that fails every later event with its label, the plan's workspace as the ops' library scratch, timed
// events, start-up profiling of a model's ops on the device, and its link and AdamW rates timed through it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/device/cuda_devices.h"
#include "engine/device/host_cost_model.h"
#include "engine/device/host_device.h"
#include "engine/device/link_rate.h"
#include "engine/device/make_device.h"
#include "engine/device/op_profile.h"
#include "models/gpt2.h"
#include "models/bert.h"
#include "memory/planner.h"
#include "memory/device_allocations.h"
#include "models/ops/workspace.h"

namespace ferry::device {
namespace {

TEST(HostDevice, StreamsRunInOrderAndWaitOnlyForEvents) {
  HostDevice dev({1 << 20, 0, 0, nullptr});
  std::atomic<bool> release{false};
  std::vector<int> order;
  std::mutex m;
  auto note = [&](int i) {
    std::lock_guard lock(m);
    order.push_back(i);
  };
  // h2d is blocked until `release`; compute waits for h2d's event, d2h does not.
  dev.run(Stream::H2D, "blocker", [&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    note(1);
  });
  const EventPtr copied = dev.record(Stream::H2D);
  dev.wait(Stream::Compute, copied, "blocker");
  dev.run(Stream::Compute, "after", [&] { note(2); });
  dev.run(Stream::D2H, "independent", [&] { note(0); });
  const EventPtr independent = dev.record(Stream::D2H);
  dev.synchronize(independent);
  {
    std::lock_guard lock(m);
    EXPECT_EQ(order, std::vector<int>{0});  // compute is still waiting
  }
  release = true;
  dev.synchronize();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  EXPECT_GT(dev.compute_stall_seconds(), 0.0);
}

TEST(HostDevice, ThrottledCopiesTakeTheLinkTime) {
  HostDevice dev({64 << 20, 1.0, 0, nullptr});  // 1 GB/s
  std::vector<std::byte> src(16 << 20, std::byte{7}), dst(16 << 20);
  const auto t0 = std::chrono::steady_clock::now();
  dev.copy(Stream::H2D, dst.data(), src.data(), static_cast<int64_t>(src.size()), "16 MiB");
  dev.synchronize();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(s, 16.7e-3);  // 16.8 MB at 1 GB/s
  EXPECT_EQ(dst, src);
}

// make_device gives the host device the config asks for, its link back slower when a test asks; and a
// CUDA device only where a build has CUDA and a GPU is there (else an error, not a host device in disguise).
TEST(MakeDevice, TheHostDeviceWithItsLinksAndACudaDeviceOnlyWithAGpu) {
  const auto dev = make_device({.kind = DeviceChoice::Kind::Host, .arena_bytes = 64 << 20, .link_gbps = 0, .d2h_link_gbps = 1.0});
  EXPECT_EQ(dev->arena().size(), 64 << 20);
  EXPECT_EQ(dev->name(), "host device (link memcpy speed to the device, 1 GB/s back)");
  std::vector<std::byte> src(16 << 20, std::byte{7}), dst(16 << 20);
  auto timed = [&](Stream s) {
    const auto t0 = std::chrono::steady_clock::now();
    dev->copy(s, dst.data(), src.data(), static_cast<int64_t>(src.size()), "16 MiB");
    dev->synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  EXPECT_GE(timed(Stream::D2H), 16.7e-3);  // 16.8 MB at 1 GB/s
  EXPECT_LT(timed(Stream::H2D), 16.7e-3);  // memcpy speed
  EXPECT_EQ(dst, src);
  if (cuda_device_count() == 0) {
    try {
      make_device({.kind = DeviceChoice::Kind::Cuda, .arena_bytes = 1 << 20});
      FAIL() << "a CUDA device without a GPU";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();  // no driver, no GPU, or no CUDA in the build
    }
  }
}

// The link rate measured through the device's own timed copies is the rate its link runs at: the throttled
// host device's configured 1 GB/s up and 0.5 back, and unthrottled memcpy well above either.
TEST(LinkRate, MeasuredThroughTheDevicesTimedCopiesIsItsLinksRate) {
  const auto slow = make_device({.kind = DeviceChoice::Kind::Host, .arena_bytes = 8 << 20, .link_gbps = 1.0, .d2h_link_gbps = 0.5});
  const double up = measure_link_gbps(*slow, Stream::H2D, 4 << 20, 3), down = measure_link_gbps(*slow, Stream::D2H, 4 << 20, 3);
  EXPECT_GT(up, 0.8);
  EXPECT_LT(up, 1.05);
  EXPECT_GT(down, 0.4);
  EXPECT_LT(down, 0.525);
  const auto fast = make_device({.kind = DeviceChoice::Kind::Host, .arena_bytes = 8 << 20});
  EXPECT_GT(measure_link_gbps(*fast, Stream::H2D, 4 << 20, 3), 2.0);
  EXPECT_THROW(measure_link_gbps(*fast, Stream::H2D, 16 << 20, 3), std::invalid_argument);  // more than the arena
  EXPECT_THROW(measure_link_gbps(*fast, Stream::Compute, 1 << 20, 3), std::invalid_argument);
}

// The device AdamW's rate timed through Device::adamw is its optimizer's: on the host device the CPU AdamW, within
// a small factor of the same kernels timed directly on as many parameters (a timing that missed the update would be
// orders faster).
TEST(LinkRate, TheDeviceAdamWRateIsItsOptimizersRate) {
  const int64_t params = 4 << 20;  // as measure_cpu_optimizer_rates: beyond the caches
  const auto dev = make_device({.kind = DeviceChoice::Kind::Host, .arena_bytes = device_adamw_arena_bytes(params, DType::BF16, 4096),
                                .compute_threads = 1});
  const double through_device = measure_device_adamw_params_per_s(*dev, params, DType::BF16, 4096, 3);
  const double direct = measure_cpu_optimizer_rates(1, DType::BF16, true).adam_params_per_s;
  EXPECT_GT(through_device, direct / 4) << through_device << " vs " << direct;
  EXPECT_LT(through_device, direct * 4) << through_device << " vs " << direct;
  EXPECT_THROW(measure_device_adamw_params_per_s(*dev, 2 * params, DType::BF16, 4096, 3), std::invalid_argument);  // more than the arena
  EXPECT_THROW(measure_device_adamw_params_per_s(*dev, params, DType::BF16, 4096, 0), std::invalid_argument);
}

TEST(HostDevice, AFailedTaskFailsLaterEventsWithItsLabel) {
  HostDevice dev({1 << 20, 0, 0, nullptr});
  dev.run(Stream::D2H, "offload gradients of bucket 3", [] { throw std::runtime_error("disk on fire"); });
  const EventPtr e = dev.record(Stream::D2H);
  dev.wait(Stream::Compute, e, "gradients of bucket 3");  // compute inherits the failure, does not hang
  bool ran = false;
  dev.run(Stream::Compute, "never", [&] { ran = true; });
  try {
    dev.synchronize();
    FAIL() << "no error";
  } catch (const std::runtime_error& err) {
    EXPECT_NE(std::string(err.what()).find("d2h: offload gradients of bucket 3: disk on fire"), std::string::npos) << err.what();
  }
  EXPECT_FALSE(ran);
}

// The plan's workspace bound on the host device becomes the compute stream's oneDNN scratch, on the thread
// that runs the ops, without an allocation; other streams keep their own; an op needing more fails its
// stream, saying how much it needed and how much the plan gave.
TEST(HostDevice, BindWorkspaceRoutesTheComputeThreadsLibraryScratch) {
  HostDevice dev({1 << 20, 0, 0, nullptr});
  std::byte* region = dev.arena().data() + 4096;
  const int64_t before = memory::DeviceAllocations::count();
  dev.bind_workspace(region, 64 << 10);
  std::byte* compute = nullptr;
  int64_t compute_bytes = 0;
  dev.run(Stream::Compute, "an op's scratchpad", [&] {
    compute = reinterpret_cast<std::byte*>(models::ops::workspace(models::ops::Scratch::Library, 1000));
    compute_bytes = models::ops::workspace_bytes(models::ops::Scratch::Library);
  });
  std::byte* other = nullptr;
  dev.run(Stream::D2H, "not the compute stream", [&] {
    other = reinterpret_cast<std::byte*>(models::ops::workspace(models::ops::Scratch::Library, 1000));
  });
  dev.synchronize();
  EXPECT_EQ(compute, region);
  EXPECT_EQ(compute_bytes, 64 << 10);
  EXPECT_NE(other, region);
  EXPECT_EQ(memory::DeviceAllocations::count(), before + 1);  // the d2h thread's own buffer; the compute thread none
  dev.run(Stream::Compute, "h.0.attn.c_attn.fwd", [] { models::ops::workspace(models::ops::Scratch::Library, (64 << 10) + 1); });
  try {
    dev.synchronize();
    FAIL() << "an op's scratch outgrew the plan's workspace unnoticed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("compute: h.0.attn.c_attn.fwd: oneDNN needs 65537 bytes of scratch; the plan's workspace holds 65536"),
              std::string::npos) << e.what();
  }
}

// Timed events measure the stream's own time between them: work queued between them is inside, work before
// the first is not.
TEST(HostDevice, TimedEventsMeasureTheStreamsTimeBetweenThem) {
  HostDevice dev({1 << 20, 0, 0, nullptr});
  dev.run(Stream::Compute, "before", [] { std::this_thread::sleep_for(std::chrono::milliseconds(60)); });
  const EventPtr from = dev.record_timed(Stream::Compute);
  dev.run(Stream::Compute, "timed", [] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); });
  const EventPtr to = dev.record_timed(Stream::Compute);
  const double s = dev.elapsed_seconds(from, to);
  EXPECT_GE(s, 0.030);
  EXPECT_LT(s, 0.060);  // the 60 ms before the first event are not counted (generous for a loaded machine)
  EXPECT_THROW(dev.elapsed_seconds(dev.record(Stream::Compute), to), std::logic_error);  // an untimed event
}

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
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i % 512), targets[i] = static_cast<int32_t>((i * 7) % 512);
    const std::vector<double> op_s = profile_ops(spec, dev, tokens, targets, {.min = 2, .min_seconds = 0, .max = 2});
    ASSERT_EQ(op_s.size(), spec.ops.size());
    for (size_t i = 0; i < op_s.size(); ++i) {
      EXPECT_GT(op_s[i], 0.0) << spec.ops[i].name;
      EXPECT_LT(op_s[i], 1.0) << spec.ops[i].name;
    }
    auto time_of = [&](const std::string& name) {
      const auto op = std::find_if(spec.ops.begin(), spec.ops.end(), [&](const models::OpSpec& o) { return o.name == name; });
      EXPECT_NE(op, spec.ops.end()) << name;
      return op_s[static_cast<size_t>(op - spec.ops.begin())];
    };
    EXPECT_GT(time_of("lm_head.bwd"), time_of("h.0.res_1.fwd")) << to_string(precision);
    EXPECT_EQ(time_of("h.1.attn.c_attn.bwd"), time_of("h.0.attn.c_attn.bwd")) << "a later block's op takes the first block's time";
    // A sample batch that is not the step's size is refused, naming both.
    EXPECT_THROW(profile_ops(spec, dev, std::vector<int32_t>(5, 0), std::vector<int32_t>(5, 0), {.min = 1, .min_seconds = 0, .max = 1}), std::invalid_argument);
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
    const std::vector<double> op_s = settled_op_seconds(m.weights, {.min_seconds = 0.05}, [&] { return m.pass(); }, &ran);
    ASSERT_EQ(op_s.size(), m.truth.size());
    double step = 0, truth = 0;
    for (size_t k = 0; k < op_s.size(); ++k) step += m.weights[k] * op_s[k], truth += m.weights[k] * m.truth[k];
    if (std::abs(step / truth - 1) > 0.05) ++off, which += " seed " + std::to_string(seed) + " (" + std::to_string(ran) + " passes)";
  }
  EXPECT_LE(off, 1) << "more than 5% off the true step:" << which;
}

// On a quiet machine profiling stops at its minimum; on one whose speed keeps swinging, at its time cap; a
// pass longer than the cap is enough alone.
TEST(OpProfile, PassesStopWhenSettledOrAtTheCap) {
  const std::vector<int> weights{1, 2};
  int ran = 0;
  settled_op_seconds(weights, {.min = 6, .min_seconds = 0}, [] { return std::vector<double>{1e-3, 2e-3}; }, &ran);
  EXPECT_EQ(ran, 6);
  settled_op_seconds(weights, {.min = 6, .min_seconds = 0.03}, [] { return std::vector<double>{1e-3, 2e-3}; }, &ran);
  EXPECT_EQ(ran, 10) << "3 ms of timed ops a pass";
  int calls = 0;
  const auto swinging = [&] {  // every other pass three times as long: the halves never agree
    const double f = ++calls % 2 ? 1.0 : 3.0;
    return std::vector<double>{0.1 * f, 0.1 * f};
  };
  const std::vector<double> op_s = settled_op_seconds(weights, {.max_seconds = 1.7}, swinging, &ran);
  EXPECT_EQ(ran, 5) << "0.2 s, 0.6 s, 0.2 s, ...: 1.8 s of timed ops after five passes, fewer than the minimum's six";
  EXPECT_DOUBLE_EQ(op_s[0], 0.1) << "the median of 0.1 0.3 0.1 0.3 0.1";
  settled_op_seconds(weights, {.max_seconds = 2.0}, [] { return std::vector<double>{3.0, 1.0}; }, &ran);
  EXPECT_EQ(ran, 1);
  EXPECT_THROW(settled_op_seconds(weights, {}, [] { return std::vector<double>{1.0}; }), std::logic_error);
}

}  // namespace
}  // namespace ferry::device
