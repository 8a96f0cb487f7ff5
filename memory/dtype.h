// DType: the one element type of every tensor and buffer in Ferry (models, memory, cpu_optim, engine),
// and the bytes it takes: every byte count is numel * dtype_bytes(dtype).
#pragma once

#include <cstdint>

namespace ferry {

enum class DType { F32, BF16, F16, I32 };

constexpr int64_t dtype_bytes(DType t) { return t == DType::BF16 || t == DType::F16 ? 2 : 4; }

constexpr const char* to_string(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::BF16: return "bf16";
    case DType::F16: return "fp16";
    case DType::I32: return "int32";
  }
  return "?";
}

}  // namespace ferry
