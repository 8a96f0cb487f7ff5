// fp32 <-> bf16/fp16 conversions (nearest-even and stochastic) and typed element storage, shared by the CUDA
// kernels and their host twins; bit-exact with cpu_optim/half.h, which the host tests check exhaustively.
#pragma once

#include <cstdint>

#include "models/cuda/hd.h"

namespace ferry::cuda {

// Storage element types: the kernels are templates over these, so one body serves fp32, bf16 and fp16.
struct Bf16 {
  uint16_t bits;
};
struct Fp16 {
  uint16_t bits;
};

FERRY_HD inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

// Nearest, ties to even; NaN stays a quiet NaN with its sign (cpu_optim::float_to_bf16).
FERRY_HD inline uint16_t float_to_bf16(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Adds 16 random bits below the bf16 mantissa and truncates: unbiased in expectation; inf stays inf.
FERRY_HD inline uint16_t float_to_bf16_stochastic(float f, uint32_t random) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);
  if ((x & 0x7fffffffu) == 0x7f800000u) return static_cast<uint16_t>(x >> 16);
  return static_cast<uint16_t>((x + (random & 0xffffu)) >> 16);
}

FERRY_HD inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0) return bits_float(sign | float_bits(static_cast<float>(mant) * 0x1p-24f));  // exact
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

// Nearest, ties to even, with subnormals; from 65520 on gives inf. The subnormal branch rounds in integer
// arithmetic (the CPU reference uses nearbyint on the scaled value: the same result, checked exhaustively).
FERRY_HD inline uint16_t float_to_half(float f) {
  const uint32_t x = float_bits(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00);
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00);
  if (ax < 0x38800000u) {  // below 2^-14: value = mant * 2^(e-150) with the implicit bit; units of 2^-24
    const uint32_t e = ax >> 23;
    if (e < 102) return sign;  // below 2^-25: rounds to zero (2^-25 itself is a tie that goes to even 0)
    const uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24: 2^-24 units = mant >> shift
    const uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    return static_cast<uint16_t>(sign | (q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u)));
  }
  uint32_t r = ax - 0x38000000u;  // rebias the exponent from 127 to 15
  r += 0xfffu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}

// 32 random bits for element `index` of a step keyed by `key` (cpu_optim::random_bits, "lowbias32").
FERRY_HD inline uint32_t random_bits(uint32_t key, uint32_t index) {
  uint32_t x = index ^ key;
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// Typed loads and nearest-even stores: kernels compute in fp32 whatever the storage.
FERRY_HD inline float load(const float* p, int64_t i) { return p[i]; }
FERRY_HD inline float load(const Bf16* p, int64_t i) { return bf16_to_float(p[i].bits); }
FERRY_HD inline float load(const Fp16* p, int64_t i) { return half_to_float(p[i].bits); }
FERRY_HD inline void store(float* p, int64_t i, float v) { p[i] = v; }
FERRY_HD inline void store(Bf16* p, int64_t i, float v) { p[i].bits = float_to_bf16(v); }
FERRY_HD inline void store(Fp16* p, int64_t i, float v) { p[i].bits = float_to_half(v); }

}  // namespace ferry::cuda
