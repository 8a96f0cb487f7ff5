// Precision rounding as one header that the host compiler and nvcc both build: fp32 <-> bf16/fp16
// (nearest even and stochastic), the counter-based random bits of stochastic rounding, typed element
// storage, and the FERRY_HD primitives the shared host/device math is written in. One source, so the CPU,
// the CUDA kernels and their host twins round alike by construction.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FERRY_HD __host__ __device__
#else
#define FERRY_HD
#endif

namespace ferry {

// Bitwise agreement between a kernel and the host rests on these: every operation below is correctly
// rounded on both sides (IEEE fma, sqrt and division; nvcc's defaults, not --use_fast_math), and the CUDA
// sources are compiled with -fmad=false so that `a * b + c` is never silently fused on the device (the host
// compiler does not fuse in ISO C++ mode either). Where a fused multiply-add is wanted it is written as fma.
FERRY_HD inline uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

FERRY_HD inline float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

FERRY_HD inline uint64_t double_bits(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
#endif
}

FERRY_HD inline float fma_f(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

FERRY_HD inline float sqrt_f(float x) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}

FERRY_HD inline double sqrt_d(double x) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}

FERRY_HD inline float div_f(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

FERRY_HD inline float max_f(float a, float b) { return a > b ? a : b; }

// Not NaN and not +-inf: the exponent field is not all ones.
FERRY_HD inline bool is_finite_f(float x) { return (float_bits(x) & 0x7f800000u) != 0x7f800000u; }

FERRY_HD inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

// Round to nearest, ties to even; NaN stays a (quiet) NaN with its sign.
FERRY_HD inline uint16_t float_to_bf16(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Stochastic rounding: adds 16 random bits below the bf16 mantissa, then truncates, so a value rounds up
// with probability equal to its distance from the lower neighbour (unbiased in expectation); inf stays inf.
FERRY_HD inline uint16_t float_to_bf16_stochastic(float f, uint32_t random) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);
  if ((x & 0x7fffffffu) == 0x7f800000u) return static_cast<uint16_t>(x >> 16);
  return static_cast<uint16_t>((x + (random & 0xffffu)) >> 16);
}

FERRY_HD inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0) return bits_float(sign | float_bits(static_cast<float>(mant) * 0x1p-24f));  // zero or subnormal: exact
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

// Round to nearest, ties to even, with fp16's subnormals (rounded in integer arithmetic, which a kernel
// runs as the host does); from 65520 on gives inf.
FERRY_HD inline uint16_t float_to_half(float f) {
  const uint32_t x = float_bits(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00);   // NaN
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00);  // >= 65520 rounds to inf
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

// 32 random bits for element `index` of a step keyed by `key` (a hash of seed and step): a counter-based
// hash, so the bits depend on no thread, tile, ISA path or device ("lowbias32" by C. Wellons).
FERRY_HD inline uint32_t random_bits(uint32_t key, uint32_t index) {
  uint32_t x = index ^ key;
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// Storage element types: the CUDA kernels are templates over these, so one body serves fp32, bf16 and fp16.
struct Bf16 {
  uint16_t bits;
};
struct Fp16 {
  uint16_t bits;
};

// Typed loads and nearest-even stores: kernels compute in fp32 whatever the storage.
FERRY_HD inline float load(const float* p, int64_t i) { return p[i]; }
FERRY_HD inline float load(const Bf16* p, int64_t i) { return bf16_to_float(p[i].bits); }
FERRY_HD inline float load(const Fp16* p, int64_t i) { return half_to_float(p[i].bits); }
FERRY_HD inline void store(float* p, int64_t i, float v) { p[i] = v; }
FERRY_HD inline void store(Bf16* p, int64_t i, float v) { p[i].bits = float_to_bf16(v); }
FERRY_HD inline void store(Fp16* p, int64_t i, float v) { p[i].bits = float_to_half(v); }

}  // namespace ferry
