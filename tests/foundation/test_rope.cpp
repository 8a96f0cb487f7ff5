// RoPE frequencies (foundation/rope.h): the default schedule, and Llama 3's scaling band by band.
#include "foundation/rope.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ferry {
namespace {

TEST(RopeInvFreq, DefaultIsThetaToTheMinusTwoIOverHeadSize) {
  const RopeScaling s{.theta = 10000.0f};
  EXPECT_EQ(rope_inv_freq(0, 64, s), 1.0f);
  for (int64_t i = 0; i < 32; ++i)
    EXPECT_FLOAT_EQ(rope_inv_freq(i, 64, s), static_cast<float>(std::pow(10000.0, -2.0 * i / 64)));
  EXPECT_FLOAT_EQ(rope_inv_freq(1, 4, s), 0.01f);  // 10000^(-1/2)
}

// Llama 3.1 8B's settings: wavelengths under 8192/4 keep their frequency, over 8192/1 are divided by 8, and
// the band between blends the two, so the frequency falls monotonically across i as it does unscaled.
TEST(RopeInvFreq, Llama3ScalingKeepsHighSlowsLowAndBlendsBetween) {
  const RopeScaling plain{.theta = 500000.0f};
  const RopeScaling llama3{.theta = 500000.0f,
                           .factor = 8.0f,
                           .low_freq_factor = 1.0f,
                           .high_freq_factor = 4.0f,
                           .original_max_position = 8192.0f};
  const double pi = 3.14159265358979323846;
  int kept = 0, slowed = 0, blended = 0;
  float previous = 2.0f;
  for (int64_t i = 0; i < 64; ++i) {
    const float base = rope_inv_freq(i, 128, plain), scaled = rope_inv_freq(i, 128, llama3);
    const double wavelen = 2 * pi / base;
    if (wavelen < 8192.0 / 4) {
      EXPECT_EQ(scaled, base) << i;
      ++kept;
    } else if (wavelen > 8192.0) {
      EXPECT_FLOAT_EQ(scaled, base / 8.0f) << i;
      ++slowed;
    } else {
      EXPECT_LT(scaled, base) << i;
      EXPECT_GT(scaled, base / 8.0f) << i;
      ++blended;
    }
    EXPECT_LT(scaled, previous) << i;
    previous = scaled;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(slowed, 0);
  EXPECT_GT(blended, 0);
}

// The blend is continuous: at the band's edges it equals the neighbouring rule.
TEST(RopeInvFreq, Llama3BlendMeetsBothNeighbours) {
  // head_size 2 has one pair, frequency theta^0 = 1, wavelength 2 pi; choose the context so 2 pi sits on an edge
  const double pi = 3.14159265358979323846;
  const RopeScaling at_high{.theta = 10.0f,
                            .factor = 4.0f,
                            .low_freq_factor = 1.0f,
                            .high_freq_factor = 2.0f,
                            .original_max_position = static_cast<float>(4 * pi)};  // high edge: 4 pi / 2 = 2 pi
  EXPECT_NEAR(rope_inv_freq(0, 2, at_high), 1.0f, 1e-6);
  const RopeScaling at_low{.theta = 10.0f,
                           .factor = 4.0f,
                           .low_freq_factor = 1.0f,
                           .high_freq_factor = 2.0f,
                           .original_max_position = static_cast<float>(2 * pi)};  // low edge: 2 pi / 1
  EXPECT_NEAR(rope_inv_freq(0, 2, at_low), 0.25f, 1e-6);
}

}  // namespace
}  // namespace ferry
