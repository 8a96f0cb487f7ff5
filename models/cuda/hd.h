// FERRY_HD and the few primitives the shared (host and device) math is written in, so that one source
// compiles to the same operations on the CPU and on the GPU: bit casts, fma, sqrt, division.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FERRY_HD __host__ __device__
#else
#define FERRY_HD
#endif

namespace ferry::cuda {

// Bitwise agreement between a kernel and its host twin rests on these: every operation below is correctly
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

}  // namespace ferry::cuda
