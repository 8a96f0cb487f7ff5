// The host device: streams ordered only by events, throttled copies that take the link's time, and a
// failed task that fails every later event with its label.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/device/cuda_devices.h"
#include "engine/device/host_device.h"
#include "engine/device/make_device.h"

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

}  // namespace
}  // namespace ferry::device
