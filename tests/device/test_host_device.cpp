// The host device: streams ordered only by events, throttled copies that take the link's time, a failed
// task that fails every later event with its label, the plan's workspace as the ops' library scratch, timed
// events, host waits in the order they were asked for, and its link and AdamW rates timed through it.
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
#include "engine/device/host_device.h"
#include "engine/device/link_rate.h"
#include "engine/device/make_device.h"
#include "engine/ops/host_cost_model.h"
#include "kernels/cpu/workspace.h"
#include "memory/device_allocations.h"

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

// A throttled copy writes each chunk of its destination only once the link would have delivered it, as a DMA
// engine does, so that a reader that did not wait for the copy's event sees old bytes (the executor's tests
// rely on it to catch a missing wait). One chunk at 0.5 MB/s lands 524 ms after the copy starts: 40 ms after
// it started, the destination is still untouched (the margin keeps a loaded machine from failing the test).
TEST(HostDevice, AThrottledCopyFillsItsDestinationAsTheLinkDeliversIt) {
  HostDevice dev({1 << 20, 0.0005, 0, nullptr});
  constexpr size_t kBytes = size_t(256) << 10;  // the copy's chunk
  std::vector<std::byte> src(kBytes, std::byte{7}), dst(kBytes, std::byte{0});
  std::atomic<bool> started{false};
  dev.run(Stream::H2D, "before the copy", [&] { started = true; });
  dev.copy(Stream::H2D, dst.data(), src.data(), static_cast<int64_t>(kBytes), "256 KiB");
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  EXPECT_EQ(std::count(dst.begin(), dst.end(), std::byte{7}), 0) << "bytes written before the link delivered them";
  dev.synchronize();
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
// a small factor of the same kernels timed directly (on the start-up probe's 4M..32M parameters; a timing that
// missed the update would be orders faster).
TEST(LinkRate, TheDeviceAdamWRateIsItsOptimizersRate) {
  const int64_t params = 4 << 20;  // the least measure_cpu_optimizer_rates updates
  const auto dev = make_device({.kind = DeviceChoice::Kind::Host, .arena_bytes = device_adamw_arena_bytes(params, DType::BF16, 4096),
                                .compute_threads = 1});
  const double through_device = measure_device_adamw_params_per_s(*dev, params, DType::BF16, 4096, 3);
  const ops::CpuOptimizerRates rates = ops::measure_cpu_optimizer_rates(1, DType::BF16, true);
  EXPECT_EQ(rates.probe_params, ops::cpu_optimizer_probe_params(ops::last_level_cache_bytes()));
  const double direct = rates.adam_params_per_s;
  EXPECT_GT(through_device, direct / 4) << through_device << " vs " << direct;
  EXPECT_LT(through_device, direct * 4) << through_device << " vs " << direct;
  EXPECT_THROW(measure_device_adamw_params_per_s(*dev, 2 * params, DType::BF16, 4096, 3), std::invalid_argument);  // more than the arena
  EXPECT_THROW(measure_device_adamw_params_per_s(*dev, params, DType::BF16, 4096, 0), std::invalid_argument);
}

// The CPU AdamW's start-up probe spans 8x the last-level cache, so its rate is memory's (the H200 machine's
// Xeon updated 4M parameters in its cache, and the offloaded steps' predictions came out short), within the
// 4M..32M parameters start-up can afford.
TEST(CpuOptimizerRates, TheProbeSpansEightTimesTheLastLevelCache) {
  int64_t previous = 0;
  EXPECT_EQ(ops::cpu_optimizer_probe_params(0), int64_t{32} << 20) << "no cache size known: the most";
  for (int64_t llc = int64_t{1} << 20; llc <= (int64_t{1} << 30); llc += int64_t{3} << 20) {
    const int64_t params = ops::cpu_optimizer_probe_params(llc);
    EXPECT_GE(params, int64_t{4} << 20) << llc;
    EXPECT_LE(params, int64_t{32} << 20) << llc;
    EXPECT_GE(params, previous) << llc;
    if (params < (int64_t{32} << 20)) {
      EXPECT_GE(params * 16, 8 * llc) << llc;  // the bytes an update touches: 16 a parameter at least
    }
    previous = params;
  }
  EXPECT_GT(ops::cpu_optimizer_probe_params(int64_t{105} << 20), int64_t{4} << 20)
      << "a 105 MiB L3 (a Sapphire Rapids Xeon's): more than the 4M parameters of before";
}

TEST(HostDevice, AFailedTaskFailsLaterEventsWithItsLabel) {
  HostDevice dev({1 << 20, 0, 0, nullptr});
  dev.run(Stream::D2H, "offload gradients of bucket 3", [] { throw std::runtime_error("disk on fire"); });
  const EventPtr e = dev.record(Stream::D2H);
  // Waiting for the event alone fails too (the CPU's AdamW waits so for gradients to land, a pipelined step for
  // its compute stream): it must not go on as if the gradients had landed.
  try {
    dev.synchronize(e);
    FAIL() << "no error from the event after a failed task";
  } catch (const std::runtime_error& err) {
    EXPECT_NE(std::string(err.what()).find("offload gradients of bucket 3: disk on fire"), std::string::npos)
        << err.what();
  }
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

// Host waits are done in the order they were asked for, as on the CUDA device (one wait kernel after another
// on one stream, their flags set by one watcher in order): a stream waiting for the second host event also
// waits for the first. The executor's order of host waits therefore runs here as a GPU runs it.
TEST(HostDevice, HostWaitsAreDoneInTheOrderTheyWereAskedFor) {
  HostDevice dev({1 << 20, 0, 0, nullptr});
  auto first = std::make_shared<HostEvent>(), second = std::make_shared<HostEvent>();
  const EventPtr after_first = dev.from_host(first), after_second = dev.from_host(second);
  std::atomic<bool> ran{false};
  dev.wait(Stream::Compute, after_second, "second host event");
  dev.run(Stream::Compute, "after the second host event", [&] { ran = true; });
  second->signal("");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(ran) << "a stream went on after the second host event while the first was not done";
  first->signal("");
  dev.synchronize(after_first);
  dev.synchronize();
  EXPECT_TRUE(ran);
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
    compute = reinterpret_cast<std::byte*>(kernels::cpu::workspace(kernels::cpu::Scratch::Library, 1000));
    compute_bytes = kernels::cpu::workspace_bytes(kernels::cpu::Scratch::Library);
  });
  std::byte* other = nullptr;
  dev.run(Stream::D2H, "not the compute stream",
          [&] { other = reinterpret_cast<std::byte*>(kernels::cpu::workspace(kernels::cpu::Scratch::Library, 1000)); });
  dev.synchronize();
  EXPECT_EQ(compute, region);
  EXPECT_EQ(compute_bytes, 64 << 10);
  EXPECT_NE(other, region);
  EXPECT_EQ(memory::DeviceAllocations::count(), before + 1);  // the d2h thread's own buffer; the compute thread none
  dev.run(Stream::Compute, "h.0.attn.c_attn.fwd",
          [] { kernels::cpu::workspace(kernels::cpu::Scratch::Library, (64 << 10) + 1); });
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

}  // namespace
}  // namespace ferry::device
