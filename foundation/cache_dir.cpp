// ferry_cache_dir(): the environment's choice of cache folder, in the XDG order.
#include "foundation/cache_dir.h"

#include <cstdlib>

namespace ferry {

std::filesystem::path ferry_cache_dir() {
  const auto given = [](const char* name) {
    const char* value = std::getenv(name);
    return value && *value ? std::filesystem::path(value) : std::filesystem::path();
  };
  if (auto ferry = given("FERRY_CACHE_DIR"); !ferry.empty()) return ferry;
  if (auto xdg = given("XDG_CACHE_HOME"); !xdg.empty()) return xdg / "ferry";
  if (auto home = given("HOME"); !home.empty()) return home / ".cache" / "ferry";
  return std::filesystem::temp_directory_path() / "ferry";
}

}  // namespace ferry
