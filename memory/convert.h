// Element conversions between the storage dtypes and fp32: widening is exact; narrowing rounds to nearest
// even (foundation/precision.h's rules). The host device stores tensors in bf16/fp16 and computes in fp32
// with these.
#pragma once

#include <cstdint>

#include "memory/dtype.h"

namespace ferry::memory {

// dst[i] = src[i] as fp32, n elements stored as `type` (F32, BF16, F16).
void widen(float* dst, const void* src, DType type, int64_t n);
// dst[i] = src[i] rounded to `type` (F32: copied), n elements.
void narrow(void* dst, DType type, const float* src, int64_t n);
// dst = src (overwrite) or dst += src, in fp32, src stored as `type`.
void accumulate_widened(float* dst, const void* src, DType type, int64_t n, bool overwrite);

}  // namespace ferry::memory
