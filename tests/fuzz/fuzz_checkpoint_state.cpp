// libFuzzer target: any state.json text parses into a range-checked TrainState or a runtime_error naming
// the field, never a crash or another exception.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "formats/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    (void)ferry::formats::parse_train_state(text, "fuzz/state.json");
  } catch (const std::runtime_error&) {
  }
  return 0;
}
