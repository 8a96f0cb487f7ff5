// Stopping (Ctrl-C, SIGTERM) never waits for a link that cannot deliver: a throttled copy gives up within
// the grace, one that ends within it finishes; the trace is written whole or not at all.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "full_disk.h"
#include "engine/device/host_device.h"
#include "engine/device/stop.h"
#include "engine/device/trace.h"
#include "test_helpers.h"

namespace ferry::device {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Runs `f`; if it hangs, the test fails in seconds rather than at ctest's timeout (a stuck thread cannot
// be joined, so the process ends).
template <class F>
void within(std::chrono::seconds limit, const char* what, F&& f) {
  auto done = std::async(std::launch::async, std::forward<F>(f));
  if (done.wait_for(limit) == std::future_status::timeout) {
    std::fprintf(stderr, "%s: still waiting after %lld s\n", what, static_cast<long long>(limit.count()));
    std::_Exit(1);
  }
  done.get();
}

// A stop requested `after` from now, on another thread, as a signal handler would; forgotten at the end.
class StopLater {
 public:
  explicit StopLater(std::chrono::milliseconds after) : thread_([after] {
    std::this_thread::sleep_for(after);
    request_stop();
  }) {}
  ~StopLater() {
    thread_.join();
    clear_stop_request();
  }

 private:
  std::thread thread_;
};

TEST(HostDevice, AStopAbandonsACopyTheLinkCannotFinish) {
  HostDevice dev({1 << 20, 1e-12, 0, nullptr});  // 4 KiB in 130 years: --set device.host.link_gbps=1e-12
  std::vector<std::byte> host(4096);
  dev.copy(Stream::H2D, dev.arena().data(), host.data(), 4096, "prefetch bucket 0");
  std::string error;
  const auto t0 = Clock::now();
  {
    const StopLater stop(100ms);
    within(5s, "synchronize after a stop", [&] {
      try {
        dev.synchronize();
      } catch (const std::runtime_error& e) {
        error = e.what();
      }
    });
  }
  EXPECT_LT(seconds_since(t0), 1.0);
  EXPECT_NE(error.find("h2d: prefetch bucket 0: a copy of 4096 bytes over the 1e-12 GB/s link would end"), std::string::npos) << error;
  EXPECT_NE(error.find("abandoned to stop (Ctrl-C, SIGTERM or SIGHUP)"), std::string::npos) << error;
}

TEST(HostDevice, ACopyThatEndsWithinTheGraceFinishesAfterAStop) {
  HostDevice dev({1 << 20, 2e-5, 0, nullptr});  // 4 KiB in 0.2 s: the step it belongs to can finish
  std::vector<std::byte> host(4096, std::byte{3});
  request_stop();
  dev.copy(Stream::H2D, dev.arena().data(), host.data(), 4096, "prefetch bucket 0");
  EXPECT_NO_THROW(dev.synchronize());
  clear_stop_request();
  EXPECT_EQ(std::vector<std::byte>(dev.arena().data(), dev.arena().data() + 4096), host);
}

TEST(Trace, AFailedWriteIsAnErrorAndLeavesNoTemporary) {
  Trace trace;
  const int track = trace.track("compute");
  for (int i = 0; i < 100; ++i) trace.slice(track, "op " + std::to_string(i), Clock::now(), Clock::now());
  const auto path = testing::scratch_path("trace.json");
  std::string error;
  {
    const testing::FileSizeLimit full_disk(1024);
    try {
      trace.write(path);
    } catch (const std::runtime_error& e) {
      error = e.what();
    }
  }
  EXPECT_NE(error.find("--trace: cannot write '" + path.string() + "'"), std::string::npos) << error;
  EXPECT_NE(error.find("File too large"), std::string::npos) << error;
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
}

}  // namespace
}  // namespace ferry::device
