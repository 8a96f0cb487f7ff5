// The whole-buffer conversions (memory/convert.h; vectorised, and with an AVX2 clone chosen at run time where
// the CPU has it) against the per-element rules of foundation/precision.h, bit for bit: every 16-bit pattern
// widened; random fp32 bits (NaNs, infinities, subnormals and exact ties among them) narrowed and accumulated,
// at lengths and starts that leave vector tails.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "foundation/precision.h"
#include "foundation/rng.h"
#include "memory/convert.h"

namespace ferry::memory {
namespace {

uint32_t bits(float f) { return float_bits(f); }

// Random fp32 values whose bits cover the special cases: a quarter are exact bf16/fp16 ties, some NaN and inf.
std::vector<float> awkward_floats(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t x = static_cast<uint32_t>(rng.below(uint64_t{1} << 32));
    switch (i % 8) {
      case 0: x = (x & 0xffff0000u) | 0x8000u; break;                        // a bf16 tie
      case 1: x = (x & 0xffffe000u) | 0x1000u; break;                        // an fp16 tie (in fp16's range or not)
      case 2: x = (x & 0x80000000u) | 0x7f800000u | (x & 0x7fffffu); break;  // NaN (or inf when the mantissa is 0)
      case 3: x &= 0x807fffffu; break;                                       // zero or subnormal
      case 4: x = (x & 0x807fffffu) | 0x38000000u; break;                    // around fp16's smallest normals
      default: break;
    }
    f[i] = bits_float(x);
  }
  return f;
}

TEST(Convert, EveryBufferConversionIsThePerElementRuleBitForBit) {
  for (DType t : {DType::BF16, DType::F16})
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{15}, size_t{16}, size_t{33}, size_t{4099}})
      for (size_t start : {size_t{0}, size_t{1}, size_t{3}}) {
        SCOPED_TRACE(std::string(to_string(t)) + " n " + std::to_string(n) + " start " + std::to_string(start));
        const std::vector<float> src = awkward_floats(n + start, n * 7 + start);
        std::vector<uint16_t> narrowed(n + start, 0xabcd);
        narrow(narrowed.data() + start, t, src.data() + start, static_cast<int64_t>(n));
        for (size_t i = 0; i < n + start; ++i) {
          const uint16_t want = i < start ? 0xabcd : t == DType::BF16 ? float_to_bf16(src[i]) : float_to_half(src[i]);
          ASSERT_EQ(narrowed[i], want) << "element " << i << " bits " << std::hex << bits(src[i]);
        }
        std::vector<float> widened(n + start, 7.0f), summed(src);
        widen(widened.data() + start, narrowed.data() + start, t, static_cast<int64_t>(n));
        accumulate_widened(summed.data() + start, narrowed.data() + start, t, static_cast<int64_t>(n), false);
        for (size_t i = start; i < n + start; ++i) {
          const float w = t == DType::BF16 ? bf16_to_float(narrowed[i]) : half_to_float(narrowed[i]);
          ASSERT_EQ(bits(widened[i]), bits(w)) << "element " << i;
          const float sum = src[i] + w;  // of two NaNs either may come out (the compiler may swap an add's operands)
          if (sum != sum) ASSERT_NE(summed[i], summed[i]) << "element " << i;
          else ASSERT_EQ(bits(summed[i]), bits(sum)) << "element " << i;
        }
        for (size_t i = 0; i < start; ++i) ASSERT_EQ(widened[i], 7.0f) << "before the start: untouched";
      }
}

TEST(Convert, EverySixteenBitPatternWidensAsItsRule) {
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> out(65536);
  widen(out.data(), all.data(), DType::BF16, 65536);
  for (uint32_t h = 0; h < 65536; ++h) ASSERT_EQ(bits(out[h]), bits(bf16_to_float(static_cast<uint16_t>(h)))) << h;
  widen(out.data(), all.data(), DType::F16, 65536);
  for (uint32_t h = 0; h < 65536; ++h) ASSERT_EQ(bits(out[h]), bits(half_to_float(static_cast<uint16_t>(h)))) << h;
}

}  // namespace
}  // namespace ferry::memory
