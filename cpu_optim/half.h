// Scalar conversions between fp32 and the 16-bit formats (bf16, fp16), and the counter-based random bits
// of stochastic rounding. The vector kernels implement the same rules; these are the reference.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace ferry::cpu_optim {

inline float bf16_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// Round to nearest, ties to even; NaN stays a (quiet) NaN with its sign.
inline uint16_t float_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Stochastic rounding: adds 16 random bits below the bf16 mantissa, then truncates, so a value rounds up
// with probability equal to its distance from the lower neighbour (unbiased in expectation).
inline uint16_t float_to_bf16_stochastic(float f, uint32_t random) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);
  if ((x & 0x7fffffffu) == 0x7f800000u) return static_cast<uint16_t>(x >> 16);  // inf stays inf
  return static_cast<uint16_t>((x + (random & 0xffffu)) >> 16);
}

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0) {
    // zero or subnormal: mant * 2^-24, exact in fp32
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(static_cast<float>(mant) * 0x1p-24f));
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

// Round to nearest, ties to even, with fp16's subnormals; beyond 65504 (from 65520 on) gives inf.
inline uint16_t float_to_half(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7e00;                 // NaN
  if (ax >= 0x477ff000u) return sign | 0x7c00;                // >= 65520 rounds to inf
  if (ax < 0x38800000u) {                                     // below 2^-14: fp16 subnormal (or zero)
    const float scaled = std::bit_cast<float>(ax) * 0x1p24f;  // exact: units of 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));  // the FPU rounds to nearest even
  }
  uint32_t r = ax - 0x38000000u;                              // rebias the exponent from 127 to 15
  r += 0xfffu + ((r >> 13) & 1u);
  return sign | static_cast<uint16_t>(r >> 13);
}

// 32 random bits for element `index` of a step keyed by `key` (a hash of seed and step): a counter-based
// hash, so the bits do not depend on threads, tiles or the ISA path ("lowbias32" by C. Wellons).
inline uint32_t random_bits(uint32_t key, uint32_t index) {
  uint32_t x = index ^ key;
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

}  // namespace ferry::cpu_optim
