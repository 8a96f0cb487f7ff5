// foundation/precision.h, the one rounding the CPU, the CUDA kernels and their host twins share, against
// independent references (the nearer neighbour in double, the CPU's F16C conversions): every bf16 and fp16
// pattern read back, fp32 values around every pattern (the ties and their neighbours), every fp32 below
// fp16's normal range, a dense stride over all 2^32 patterns and random ones.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>

#include "foundation/precision.h"
#include "foundation/rng.h"

namespace ferry {
namespace {

uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }

// Independent reference for bf16 rounding: the nearer of the two bf16 neighbours in double, ties to even.
uint16_t bf16_reference(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return static_cast<uint16_t>((bits >> 16) | 0x40);  // a quiet NaN, sign and payload's top kept
  const auto lo = static_cast<uint16_t>(bits >> 16), hi = static_cast<uint16_t>(lo + 1);
  auto value = [](uint16_t h) {  // the exponent-all-ones neighbour counts as 2^128 (where rounding overflows)
    return (h & 0x7f80) == 0x7f80 ? std::copysign(std::ldexp(1.0, 128), double(bf16_to_float(h)))
                                  : double(bf16_to_float(h));
  };
  const double dl = std::abs(double(x) - value(lo)), dh = std::abs(double(x) - value(hi));
  if (dl != dh) return dl < dh ? lo : hi;
  return (lo & 1) ? hi : lo;
}

__attribute__((target("f16c"))) uint16_t f16_hardware(float x) {
  return static_cast<uint16_t>(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float f16_hardware_to_float(uint16_t h) { return _cvtsh_ss(h); }

// fp16 as a count of ulps in double: the ulp of |f|'s binade (2^-24 below 2^-14), the quotient rounded to
// nearest even by the FPU; (binade + 14) * 1024 + ulps is then the encoding, carries and subnormals included.
uint16_t half_reference(float f) {
  const auto sign = static_cast<uint16_t>((bits_of(f) >> 16) & 0x8000);
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00);
  const double value = std::fabs(static_cast<double>(f));
  if (value == 0) return sign;
  if (std::isinf(f)) return static_cast<uint16_t>(sign | 0x7c00);
  if (value < 0x1p-14) {  // binade -14, scaled to units of 2^-24 exactly in fp32
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(std::fabs(f) * 0x1p24f)));
  }
  const int binade = std::ilogb(value);
  const double ulps = std::nearbyint(std::ldexp(value, 10 - binade));
  const double encoded = (binade + 14) * 1024.0 + ulps;
  return static_cast<uint16_t>(sign | (encoded >= 0x7c00 ? 0x7c00 : static_cast<uint16_t>(encoded)));
}

double half_value_reference(uint16_t h) {
  const int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  const double magnitude = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
  return h & 0x8000 ? -magnitude : magnitude;
}

TEST(Precision, Bf16RoundsToNearestEven) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    ASSERT_EQ(bits_of(bf16_to_float(static_cast<uint16_t>(h))), h << 16);
    for (uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      const float f = std::bit_cast<float>((h << 16) | low);
      ASSERT_EQ(float_to_bf16(f), bf16_reference(f)) << std::hex << ((h << 16) | low);
    }
  }
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 997) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(u));
    ASSERT_EQ(float_to_bf16(f), bf16_reference(f)) << std::hex << u;
  }
}

// Stochastic rounding keeps inf and NaN, and otherwise truncates after adding the random bits' low 16 below
// the bf16 mantissa: it rounds away from zero exactly when they reach past the next bf16.
TEST(Precision, Bf16StochasticRoundsUpWhenTheRandomBitsCarry) {
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 997) {
    const uint32_t x = static_cast<uint32_t>(u), random = random_bits(0x9e3779b9u, x);
    const float f = std::bit_cast<float>(x);
    const uint16_t got = float_to_bf16_stochastic(f, random);
    if (std::isnan(f) || std::isinf(f)) {
      ASSERT_EQ(got, float_to_bf16(f)) << std::hex << u;
      continue;
    }
    const bool carries = (x & 0xffffu) + (random & 0xffffu) >= 0x10000u;
    ASSERT_EQ(got, static_cast<uint16_t>((x >> 16) + (carries ? 1 : 0))) << std::hex << u;
  }
}

TEST(Precision, Fp16RoundsToNearestEvenWithSubnormals) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = half_to_float(static_cast<uint16_t>(h));
    if (((h >> 10) & 0x1f) == 0x1f) {  // inf and NaN keep their class and sign
      ASSERT_EQ(std::isnan(f), (h & 0x3ff) != 0) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), half_value_reference(static_cast<uint16_t>(h))) << std::hex << h;
    const uint32_t x = bits_of(f);
    for (uint32_t d : {0x0u, 0x1u, 0xfffu, 0x1000u, 0x1001u, 0x1fffu}) {  // below, at and above the midpoint
      const float g = std::bit_cast<float>(x + d);
      ASSERT_EQ(float_to_half(g), half_reference(g)) << std::hex << (x + d);
    }
  }
  for (uint32_t u = 0x32800000u; u < 0x38800000u; ++u)
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float f = std::bit_cast<float>(u | sign);
      ASSERT_EQ(float_to_half(f), half_reference(f)) << std::hex << (u | sign);
    }
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 997) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(u));
    ASSERT_EQ(float_to_half(f), half_reference(f)) << std::hex << u;
  }
}

TEST(HalfConversions, RoundToNearestEvenAgainstIndependentReferences) {
  Rng rng(12);
  const bool f16c = __builtin_cpu_supports("f16c");
  for (int i = 0; i < 2000000; ++i) {
    const auto bits = static_cast<uint32_t>(rng.next_u64());
    const float x = std::bit_cast<float>(bits);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(x))));
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(x))));
      continue;
    }
    ASSERT_EQ(float_to_bf16(x), bf16_reference(x)) << x;
    if (f16c) {
      ASSERT_EQ(float_to_half(x), f16_hardware(x)) << x;
    }
    // fp16 values near its range: rescale the random bits into [2^-26, 2^17)
    const float y =
        std::ldexp(1.0f + float(bits & 0xffff) / 65536.0f, int(bits >> 16) % 43 - 26) * ((bits >> 31) ? -1 : 1);
    if (f16c) {
      ASSERT_EQ(float_to_half(y), f16_hardware(y)) << y;
    }
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {  // every half converts exactly and back
    const float f = half_to_float(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(float_to_half(f), h) << h;
    }
    if (f16c && !std::isnan(f)) {
      ASSERT_EQ(f, f16_hardware_to_float(static_cast<uint16_t>(h))) << h;
    }
  }
}

TEST(Precision, TypedLoadStoreRoundTrip) {
  Bf16 b{};
  Fp16 h{};
  store(&b, 0, 1.00390625f);  // halfway between 1 and the next bf16: ties to even, 1
  store(&h, 0, 65520.0f);     // rounds to inf in fp16
  EXPECT_EQ(load(&b, 0), 1.0f);
  EXPECT_TRUE(std::isinf(load(&h, 0)));
}

}  // namespace
}  // namespace ferry
