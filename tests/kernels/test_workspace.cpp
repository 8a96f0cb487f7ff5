// The ops' per-thread workspace bound to planned memory: used as is, never allocated, and a request
// larger than the plan's workspace refused with both sizes.
#include <gtest/gtest.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <thread>

#include "memory/device_allocations.h"
#include "memory/host_buffer.h"
#include "kernels/cpu/workspace.h"

namespace ferry::kernels::cpu {
namespace {

// Runs `body` on a thread of its own: workspaces and their bindings are per thread, and a fresh thread
// starts with none, whatever earlier tests did on the main one.
template <typename Body>
void on_fresh_thread(Body body) {
  std::thread t(body);
  t.join();
}

TEST(Workspace, ABoundRegionIsUsedWithoutACountedAllocation) {
  memory::HostBuffer planned(64 << 10);  // stands for the plan's workspace tensor in the arena
  std::byte* region = planned.as<std::byte>().data();
  on_fresh_thread([&] {
    const int64_t before = memory::DeviceAllocations::count();
    bind_workspace(Scratch::Library, region, 64 << 10);
    EXPECT_EQ(reinterpret_cast<std::byte*>(workspace(Scratch::Library, 1000)), region);
    EXPECT_EQ(reinterpret_cast<std::byte*>(workspace(Scratch::Library, 64 << 10)), region);  // exactly full
    EXPECT_EQ(workspace_bytes(Scratch::Library), 64 << 10);
    EXPECT_EQ(memory::DeviceAllocations::count(), before);
    // The op's own scratch is not the library's: it still has a buffer of its own.
    EXPECT_NE(reinterpret_cast<std::byte*>(workspace(Scratch::Op, 1000)), region);
    EXPECT_EQ(memory::DeviceAllocations::count(), before + 1);
    // Unbound, the thread's own buffer again, grown by a counted allocation.
    bind_workspace(Scratch::Library, nullptr, 0);
    EXPECT_NE(reinterpret_cast<std::byte*>(workspace(Scratch::Library, 1000)), region);
    EXPECT_EQ(memory::DeviceAllocations::count(), before + 2);
  });
}

TEST(Workspace, ARequestLargerThanTheBoundRegionIsRefusedWithBothSizes) {
  memory::HostBuffer planned(4096);
  on_fresh_thread([&] {
    const int64_t before = memory::DeviceAllocations::count();
    bind_workspace(Scratch::Library, planned.as<std::byte>().data(), 4000);
    try {
      workspace(Scratch::Library, 4001);
      ADD_FAILURE() << "an oversized request was served";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("oneDNN needs 4001 bytes of scratch; the plan's workspace holds 4000: "), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(memory::DeviceAllocations::count(), before);  // refused, not grown
    EXPECT_THROW(bind_workspace(Scratch::Library, planned.as<std::byte>().data() + 8, 64), std::invalid_argument);  // misaligned
  });
}

}  // namespace
}  // namespace ferry::kernels::cpu
