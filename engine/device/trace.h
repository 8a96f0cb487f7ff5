// Trace: a Chrome / Perfetto trace of what ran where: one track per stream and per CPU worker, one slice
// per op, copy and optimizer task, named after the op or bucket. Open the file in ui.perfetto.dev.
#pragma once

#include <chrono>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace ferry::device {

class Trace {
 public:
  using Clock = std::chrono::steady_clock;

  Trace();
  // A track (a row in the viewer), e.g. "compute", "h2d", "cpu-adam"; returns its id.
  int track(const std::string& name);
  // A finished slice on a track. Thread-safe.
  void slice(int track, const std::string& name, Clock::time_point start, Clock::time_point end);
  // Recording on/off (off: slice() does nothing), e.g. to trace only some steps.
  void enable(bool on) { enabled_ = on; }
  bool enabled() const { return enabled_; }
  size_t slices() const;
  // Writes the Chrome trace-event JSON.
  void write(const std::filesystem::path& path) const;

 private:
  struct Slice {
    int track;
    std::string name;
    double start_us, dur_us;
  };
  mutable std::mutex mutex_;
  Clock::time_point origin_;
  std::vector<std::string> tracks_;
  std::vector<Slice> slices_;
  bool enabled_ = true;
};

}  // namespace ferry::device
