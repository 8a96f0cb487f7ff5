// Faults: failure injection for tests. Every task whose label contains the injected text fails instead of
// running, so tests can check that a failure names its op or bucket and loses nothing.
#pragma once

#include <string>

namespace ferry::engine {

struct Faults {
  std::string label;  // empty: none
  bool hits(const std::string& task) const { return !label.empty() && task.find(label) != std::string::npos; }
};

}  // namespace ferry::engine
