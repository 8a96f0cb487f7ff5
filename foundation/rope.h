// Rotary position embeddings' frequencies, one header for the host compiler and nvcc: the angle of pair i of a
// head at position t is t * rope_inv_freq(i, ...), as Hugging Face's Llama computes it (default and `llama3`).
#pragma once

#include <cmath>
#include <cstdint>

#include "foundation/precision.h"

namespace ferry {

// config.json's rope_theta and rope_scaling. factor == 0: no scaling (rope_type "default"); otherwise
// Llama 3's: long wavelengths slowed by `factor`, short ones kept, a smooth blend between.
struct RopeScaling {
  float theta = 10000.0f;
  float factor = 0.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  float original_max_position = 8192.0f;
};

// Pair i in [0, head_size/2) rotates at theta^(-2i/head_size) radians per position. Computed in double and
// rounded once: Hugging Face computes the same value in fp32 (pow of an fp32 exponent), within an ulp of this.
FERRY_HD inline float rope_inv_freq(int64_t i, int64_t head_size, const RopeScaling& s) {
  const double base =
      1.0 / pow(static_cast<double>(s.theta), static_cast<double>(2 * i) / static_cast<double>(head_size));
  if (s.factor == 0.0f) return static_cast<float>(base);
  const double pi = 3.14159265358979323846;
  const double wavelen = 2.0 * pi / base;
  const double low_freq_wavelen = s.original_max_position / s.low_freq_factor;
  const double high_freq_wavelen = s.original_max_position / s.high_freq_factor;
  if (wavelen < high_freq_wavelen) return static_cast<float>(base);            // high frequency: kept
  if (wavelen > low_freq_wavelen) return static_cast<float>(base / s.factor);  // low frequency: slowed
  const double smooth =
      (s.original_max_position / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return static_cast<float>((1.0 - smooth) * base / s.factor + smooth * base);
}

}  // namespace ferry
