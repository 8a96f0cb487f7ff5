// Conversion loops over whole buffers; plain loops over the scalar rules, which the compiler vectorises, once
// more for AVX2 (target_clones: the loader picks the clone the CPU runs). The host device converts every op's
// operands through these: with AVX2, 2-3x the SSE2 loops' rate on buffers that fit in cache.
#include "memory/convert.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "foundation/precision.h"

// Every supported CPU runs the default clone; AVX2 (and its 256-bit integer ops) doubles the lanes.
#define FERRY_CONVERT_CLONES __attribute__((target_clones("avx2", "default")))

namespace ferry::memory {
namespace {

void require_float(DType type, const char* what) {
  if (type == DType::I32) throw std::invalid_argument(std::string(what) + ": int32 is not a floating-point storage");
}

}  // namespace

FERRY_CONVERT_CLONES void widen(float* dst, const void* src, DType type, int64_t n) {
  require_float(type, "widen");
  const auto* h = static_cast<const uint16_t*>(src);
  switch (type) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(h[i]);
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(h[i]);
      return;
    case DType::I32: break;
  }
}

FERRY_CONVERT_CLONES void narrow(void* dst, DType type, const float* src, int64_t n) {
  require_float(type, "narrow");
  auto* h = static_cast<uint16_t*>(dst);
  switch (type) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) h[i] = float_to_bf16(src[i]);
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) h[i] = float_to_half(src[i]);
      return;
    case DType::I32: break;
  }
}

FERRY_CONVERT_CLONES void accumulate_widened(float* dst, const void* src, DType type, int64_t n, bool overwrite) {
  require_float(type, "accumulate");
  if (overwrite) return widen(dst, src, type, n);
  const auto* f = static_cast<const float*>(src);
  const auto* h = static_cast<const uint16_t*>(src);
  switch (type) {
    case DType::F32: for (int64_t i = 0; i < n; ++i) dst[i] += f[i]; return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] += bf16_to_float(h[i]);
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] += half_to_float(h[i]);
      return;
    case DType::I32: break;
  }
}

}  // namespace ferry::memory
