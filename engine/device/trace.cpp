// Trace: slices in memory, written once, atomically, as trace-event JSON ("X" complete events, thread names
// as metadata).
#include "engine/device/trace.h"

#include <nlohmann/json.hpp>

#include "foundation/atomic_file.h"

namespace ferry::device {

Trace::Trace() : origin_(Clock::now()) {}

int Trace::track(const std::string& name) {
  std::lock_guard lock(mutex_);
  for (size_t i = 0; i < tracks_.size(); ++i)
    if (tracks_[i] == name) return static_cast<int>(i);
  tracks_.push_back(name);
  return static_cast<int>(tracks_.size()) - 1;
}

void Trace::slice(int track, const std::string& name, Clock::time_point start, Clock::time_point end) {
  if (!enabled_) return;
  const double s = std::chrono::duration<double, std::micro>(start - origin_).count();
  const double d = std::chrono::duration<double, std::micro>(end - start).count();
  std::lock_guard lock(mutex_);
  slices_.push_back({track, name, s, d});
}

size_t Trace::slices() const {
  std::lock_guard lock(mutex_);
  return slices_.size();
}

void Trace::write(const std::filesystem::path& path) const {
  std::lock_guard lock(mutex_);
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", "ferry"}}}});
  for (size_t i = 0; i < tracks_.size(); ++i) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", i + 1}, {"args", {{"name", tracks_[i]}}}});
    events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 1}, {"tid", i + 1}, {"args", {{"sort_index", i}}}});
  }
  for (const Slice& s : slices_)
    events.push_back({{"name", s.name}, {"ph", "X"}, {"pid", 1}, {"tid", s.track + 1}, {"ts", s.start_us}, {"dur", s.dur_us}});
  write_file_atomically(path, nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n",
                        "--trace");
}

}  // namespace ferry::device
