// SlowStage: start-up work (profiling, planning, pinning host memory, initialising weights, the warm-up) says
// so when it runs long: silent when quick, a line every `every` while it runs, and its time once it ends.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "engine/progress.h"

namespace ferry::engine {

class SlowStage {
 public:
  SlowStage(Progress& progress, std::string what, std::chrono::milliseconds every = std::chrono::seconds(10));
  ~SlowStage();
  SlowStage(const SlowStage&) = delete;
  SlowStage& operator=(const SlowStage&) = delete;

 private:
  Progress& progress_;
  std::string what_;
  std::chrono::steady_clock::time_point start_;
  std::mutex mutex_;
  std::condition_variable done_;
  bool finished_ = false, reported_ = false;
  int unwinding_at_start_;  // std::uncaught_exceptions() when it began: more at the end means the work threw
  std::thread watcher_;
};

// f() inside a SlowStage: for a member's initialiser.
template <class F>
auto during(Progress& progress, std::string what, F&& f) {
  const SlowStage stage(progress, std::move(what));
  return std::forward<F>(f)();
}

}  // namespace ferry::engine
