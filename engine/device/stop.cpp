// The stop request as lock-free atomics (a signal handler may set it), its time on CLOCK_MONOTONIC, which
// clock_gettime reads async-signal-safely and steady_clock reads too.
#include "engine/device/stop.h"

#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <thread>

namespace ferry::device {
namespace {

using Clock = std::chrono::steady_clock;
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int64_t>::is_always_lock_free && std::atomic<int>::is_always_lock_free,
              "a signal handler may only touch lock-free atomics");

std::atomic<bool> g_requested{false};
std::atomic<int64_t> g_requested_at_ns{0};  // CLOCK_MONOTONIC; 0: not yet
std::atomic<int> g_work_to_finish{0};

// How often a sleeping copy looks at the flag: well inside a second.
constexpr std::chrono::milliseconds kSlice{50};

Clock::time_point requested_at() {
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(g_requested_at_ns.load())));
}

}  // namespace

void request_stop() noexcept {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  int64_t unset = 0;
  g_requested_at_ns.compare_exchange_strong(unset, int64_t(now.tv_sec) * 1'000'000'000 + now.tv_nsec);
  g_requested.store(true);
}

bool stop_requested() noexcept { return g_requested.load(); }
const std::atomic<bool>& stop_flag() noexcept { return g_requested; }

void clear_stop_request() noexcept {
  g_requested.store(false);
  g_requested_at_ns.store(0);
}

bool stop_has_work_to_finish() noexcept { return g_work_to_finish.load() > 0; }
StopFinishesWork::StopFinishesWork() noexcept { g_work_to_finish.fetch_add(1); }
StopFinishesWork::~StopFinishesWork() { g_work_to_finish.fetch_sub(1); }

void sleep_until_unless_stopped(Clock::time_point until, Clock::time_point done_by, const std::string& what) {
  for (;;) {
    const auto now = Clock::now();
    if (stop_requested() && done_by > requested_at() + kStopGrace)
      throw Interrupted(fmt::format("{} would end {:.3g} s from now; abandoned to stop (Ctrl-C, SIGTERM or SIGHUP)",
                                    what, std::chrono::duration<double>(done_by - now).count()));
    if (now >= until) return;
    std::this_thread::sleep_until(std::min(until, now + kSlice));
  }
}

}  // namespace ferry::device
