// Faults: failure and delay injection for tests. Every task whose label contains the injected text fails
// instead of running, so tests can check that a failure names its op or bucket and loses nothing; every CPU
// worker task whose label contains the slow text first sleeps, so that a missing wait for it shows as a race.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace ferry::engine {

struct Faults {
  std::string label;  // empty: none
  bool hits(std::string_view task) const { return !label.empty() && task.find(label) != std::string::npos; }

  std::string slow_label;  // empty: none
  std::chrono::microseconds slow{0};
  bool slows(std::string_view task) const { return !slow_label.empty() && task.find(slow_label) != std::string::npos; }
};

}  // namespace ferry::engine
