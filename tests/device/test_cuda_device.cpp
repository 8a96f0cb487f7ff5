// The CUDA device (with a GPU; skipped without one): copies between pinned host memory and the arena,
// streams ordered by events, host work in stream order and its failures, accumulate against the host.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/device/cuda_devices.h"
#include "memory/convert.h"
#include "memory/pinned_pool.h"

#ifdef FERRY_WITH_CUDA
#include "engine/device/cuda_device.h"
#endif

namespace ferry::device {
namespace {

#ifdef FERRY_WITH_CUDA
#define REQUIRE_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"
#else
#define REQUIRE_GPU() GTEST_SKIP() << "built without CUDA (FERRY_CUDA=OFF or no nvcc)"
#endif

TEST(CudaDevice, CopiesRoundTripThroughTheArenaInEventOrder) {
  REQUIRE_GPU();
#ifdef FERRY_WITH_CUDA
  const int64_t n = int64_t(8) << 20;  // 32 MiB of floats
  CudaDevice dev({0, n * 4 * 2});
  memory::PinnedHostPool pool(n * 4 * 2, {true, false});
  auto* src = reinterpret_cast<float*>(pool.carve(n * 4));
  auto* dst = reinterpret_cast<float*>(pool.carve(n * 4));
  for (int64_t i = 0; i < n; ++i) src[i] = static_cast<float>(i % 1000) * 0.5f;
  std::byte* slot = dev.arena().data() + n * 4;
  dev.copy(Stream::H2D, slot, src, n * 4, "up");
  dev.wait(Stream::D2H, dev.record(Stream::H2D), "up");  // d2h must not read before the upload lands
  dev.copy(Stream::D2H, dst, slot, n * 4, "down");
  dev.synchronize();
  for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ(dst[i], src[i]) << i;
  // zero() clears on the device, in stream order with the copies.
  dev.zero(Stream::H2D, slot, 4096, "zero");
  dev.wait(Stream::D2H, dev.record(Stream::H2D), "zero");
  dev.copy(Stream::D2H, dst, slot, 4096, "down");
  dev.synchronize();
  for (int i = 0; i < 1024; ++i) ASSERT_EQ(dst[i], 0.0f) << i;
#endif
}

TEST(CudaDevice, AStreamWaitsForHostWork) {
  REQUIRE_GPU();
#ifdef FERRY_WITH_CUDA
  CudaDevice dev({0, 1 << 20});
  memory::PinnedHostPool pool(1 << 20, {true, false});
  auto* host = reinterpret_cast<int*>(pool.carve(4096));
  auto* back = reinterpret_cast<int*>(pool.carve(4096));
  host[0] = 1;
  auto done = std::make_shared<HostEvent>();
  dev.wait(Stream::H2D, dev.from_host(done), "host work");
  dev.copy(Stream::H2D, dev.arena().data(), host, 4, "after host work");
  dev.wait(Stream::D2H, dev.record(Stream::H2D), "up");
  dev.copy(Stream::D2H, back, dev.arena().data(), 4, "down");
  std::thread worker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    host[0] = 42;  // the copy queued before must see this: it waits for the host event
    done->signal("");
  });
  dev.synchronize();
  worker.join();
  EXPECT_EQ(back[0], 42);

  auto failed = std::make_shared<HostEvent>();
  dev.wait(Stream::Compute, dev.from_host(failed), "host work");
  failed->signal("cpu-adam: adamw bucket 2: injected fault");
  EXPECT_THROW(dev.synchronize(), std::runtime_error);
#endif
}

// With two flags, a third host wait reuses the first one's flag. It must still wait for its own host event:
// not be released when the first or second one is done (the first one's watcher writing the shared flag).
TEST(CudaDevice, AReusedHostWaitFlagWaitsForItsOwnHostEvent) {
  REQUIRE_GPU();
#ifdef FERRY_WITH_CUDA
  CudaDevice dev({.ordinal = 0, .arena_bytes = 1 << 20, .host_waits = 2});
  memory::PinnedHostPool pool(1 << 20, {true, false});
  auto* host = reinterpret_cast<int*>(pool.carve(4096));
  auto* back = reinterpret_cast<int*>(pool.carve(4096));
  host[0] = 7, back[0] = -1;
  auto first = std::make_shared<HostEvent>(), second = std::make_shared<HostEvent>();
  auto third = std::make_shared<HostEvent>();
  dev.wait(Stream::Compute, dev.from_host(first), "first");
  dev.wait(Stream::Compute, dev.from_host(second), "second");
  // The third from_host may wait for the first wait to return before it takes its flag: the first and second
  // host events are signalled from another thread meanwhile.
  std::thread worker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    first->signal("");
    second->signal("");
  });
  dev.wait(Stream::H2D, dev.from_host(third), "third");
  dev.copy(Stream::H2D, dev.arena().data(), host, 4, "after the third host event");
  dev.wait(Stream::D2H, dev.record(Stream::H2D), "up");
  dev.copy(Stream::D2H, back, dev.arena().data(), 4, "down");
  worker.join();
  dev.synchronize(dev.record(Stream::Compute));  // the first two waits have returned
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(reinterpret_cast<volatile int*>(back)[0], -1) << "the third wait returned before its host event";
  host[0] = 42;
  third->signal("");
  dev.synchronize();
  EXPECT_EQ(back[0], 42);
#endif
}

#ifdef FERRY_WITH_CUDA
// accumulate's kernel against the host's accumulate_widened, bitwise: overwrite, then add, for each type
// it reads, over a length that is no multiple of a block and more than the grid covers in one pass.
void expect_accumulate_matches_the_host(DType type) {
  const int64_t n = int64_t(4096) * 256 * 2 + 77;  // twice the kernel's largest grid, and a ragged end
  const int64_t src_bytes = n * dtype_bytes(type);
  CudaDevice dev({0, n * 4 + src_bytes});
  memory::PinnedHostPool pool(2 * n * 4 + src_bytes + 3 * 256, {true, false});  // each carve 256-aligned
  auto* a = reinterpret_cast<float*>(pool.carve(n * 4));
  auto* src = pool.carve(src_bytes);
  auto* got = reinterpret_cast<float*>(pool.carve(n * 4));
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[i] = a[i] = static_cast<float>((i * 7919) % 2003) * 0.37f - 300.0f;
  memory::narrow(src, type, a, n);
  std::vector<float> want(static_cast<size_t>(n), 1.5f);
  memory::accumulate_widened(want.data(), src, type, n, /*overwrite=*/true);
  memory::accumulate_widened(want.data(), src, type, n, /*overwrite=*/false);
  auto* sum = reinterpret_cast<float*>(dev.arena().data());
  std::byte* device_src = dev.arena().data() + n * 4;
  dev.copy(Stream::H2D, device_src, src, src_bytes, "source");
  dev.wait(Stream::Compute, dev.record(Stream::H2D), "source");
  dev.accumulate(Stream::Compute, sum, device_src, type, n, true, "first micro-batch");
  dev.accumulate(Stream::Compute, sum, device_src, type, n, false, "second micro-batch");
  dev.wait(Stream::D2H, dev.record(Stream::Compute), "sums");
  dev.copy(Stream::D2H, got, sum, n * 4, "sums back");
  dev.synchronize();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want[i]) << to_string(type) << " element " << i;
}
#endif

TEST(CudaDevice, AccumulateSumsEachStoredTypeInFp32AsTheHostDoes) {
  REQUIRE_GPU();
#ifdef FERRY_WITH_CUDA
  for (DType type : {DType::F32, DType::BF16, DType::F16}) expect_accumulate_matches_the_host(type);
  CudaDevice dev({0, 1 << 20});
  auto* p = reinterpret_cast<float*>(dev.arena().data());
  EXPECT_THROW(dev.accumulate(Stream::Compute, p, p, DType::I32, 4, false, "tokens"), std::invalid_argument);
#endif
}

// run() queues host code in stream order, as the host device does: it returns at once, the work runs only
// after what was queued before it (here a copy behind a host event), and work queued after it waits for it.
TEST(CudaDevice, RunQueuesHostWorkInStreamOrder) {
  REQUIRE_GPU();
#ifdef FERRY_WITH_CUDA
  CudaDevice dev({0, 1 << 20});
  memory::PinnedHostPool pool(1 << 20, {true, false});
  auto* up = reinterpret_cast<int*>(pool.carve(4096));
  auto* down = reinterpret_cast<int*>(pool.carve(4096));
  up[0] = 7, down[0] = 0;
  auto go = std::make_shared<HostEvent>();
  dev.wait(Stream::D2H, dev.from_host(go), "go");
  dev.copy(Stream::H2D, dev.arena().data(), up, 4, "up");
  dev.wait(Stream::D2H, dev.record(Stream::H2D), "up");
  dev.copy(Stream::D2H, down, dev.arena().data(), 4, "down");
  std::atomic<int> seen{-1};
  dev.run(Stream::D2H, "read the copy", [&] { seen = down[0]; });
  dev.run(Stream::D2H, "after it", [&] { seen = seen * 10; });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(seen.load(), -1);  // queued behind the host event, not run by run()'s caller
  go->signal("");
  dev.synchronize();
  EXPECT_EQ(seen.load(), 70);
#endif
}

// Host work that throws fails its stream like the host device's: synchronize() reports it with the stream
// and label, and later host work on that stream is skipped.
TEST(CudaDevice, FailedHostWorkIsReportedBySynchronizeWithItsStreamAndLabel) {
  REQUIRE_GPU();
#ifdef FERRY_WITH_CUDA
  CudaDevice dev({0, 1 << 20});
  dev.run(Stream::D2H, "offload gradients of bucket 3", [] { throw std::runtime_error("disk on fire"); });
  std::atomic<bool> ran{false};
  dev.run(Stream::D2H, "never", [&] { ran = true; });
  try {
    dev.synchronize();
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("d2h: offload gradients of bucket 3: disk on fire"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(ran.load());
#endif
}

// The CUDA device keeps the plan's workspace for its libraries.
TEST(CudaDevice, BindWorkspaceRecordsTheRegion) {
  REQUIRE_GPU();
#ifdef FERRY_WITH_CUDA
  CudaDevice dev({0, 1 << 20});
  dev.bind_workspace(dev.arena().data() + 4096, 8192);
  EXPECT_EQ(dev.workspace(), dev.arena().data() + 4096);
  EXPECT_EQ(dev.workspace_bytes(), 8192);
  dev.bind_workspace(nullptr, 0);
  EXPECT_EQ(dev.workspace_bytes(), 0);
#endif
}

}  // namespace
}  // namespace ferry::engine
