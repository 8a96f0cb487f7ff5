// Rng: a small, fully specified random generator (SplitMix64 + Box-Muller) so that initial weights and
// batch order are the same on every platform and standard library for a given seed.
#pragma once

#include <cmath>
#include <cstdint>

namespace ferry {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  // Skips n draws of next_u64 at the cost of one: the state only advances by a constant per draw, so a
  // stream can be split into chunks that start where a sequential walk would be (models/weight_init.cpp).
  void discard(uint64_t n) { state_ += n * kGolden; }

  uint64_t next_u64() {
    uint64_t z = (state_ += kGolden);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return static_cast<uint64_t>(uniform() * static_cast<double>(n)); }
  // Standard normal from exactly kDrawsPerNormal draws (no rejection, no cached second value).
  static constexpr uint64_t kDrawsPerNormal = 2;
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  static constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
  uint64_t state_;
};

}  // namespace ferry
