// libFuzzer target: any YAML text parses into a validated Config or a runtime_error naming the problem.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "engine/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string yaml(reinterpret_cast<const char*>(data), size);
  try {
    (void)ferry::engine::parse_config(yaml, "fuzz.yaml", ".");
  } catch (const std::runtime_error&) {
  }
  return 0;
}
