// libFuzzer target: the safetensors reader must turn any bytes into a file or an error, never a crash.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data), reinterpret_cast<const std::byte*>(data) + size);
  try {
    const auto f = ferry::formats::SafetensorsFile::parse(std::move(bytes), "fuzz");
    for (const auto& e : f.entries()) {
      try {
        (void)f.read_f32(e.name);
      } catch (const std::runtime_error&) {
      }
      try {
        (void)f.read_i32(e.name);
      } catch (const std::runtime_error&) {
      }
    }
  } catch (const std::runtime_error&) {
  }
  return 0;
}
