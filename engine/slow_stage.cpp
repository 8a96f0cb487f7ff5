// SlowStage: a watcher thread that reports start-up work still running after each interval, and its time.
#include "engine/slow_stage.h"

#include <fmt/format.h>

#include <exception>

namespace ferry::engine {

SlowStage::SlowStage(Progress& progress, std::string what, std::chrono::milliseconds every)
    : progress_(progress), what_(std::move(what)), start_(std::chrono::steady_clock::now()), unwinding_at_start_(std::uncaught_exceptions()) {
  watcher_ = std::thread([this, every] {
    std::unique_lock lock(mutex_);
    while (!done_.wait_for(lock, every, [this] { return finished_; })) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      progress_.message(fmt::format("start-up: {} ({:.0f} s so far)", what_, s));  // Progress is thread-safe
      reported_ = true;
    }
  });
}

SlowStage::~SlowStage() {
  {
    const std::lock_guard lock(mutex_);
    finished_ = true;
  }
  done_.notify_one();
  watcher_.join();
  if (reported_) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const bool failed = std::uncaught_exceptions() > unwinding_at_start_;  // the error itself follows
    progress_.message(fmt::format("start-up: {}: {} {:.1f} s", what_, failed ? "failed after" : "done in", s));
  }
}

}  // namespace ferry::engine
