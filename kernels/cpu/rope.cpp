// Rotary position embeddings of q or k (Llama), forward and backward: each pair (i, i + hs/2) of a head
// rotated by t * rope_inv_freq(i), Hugging Face's rotate_half layout. The angle is the fp32 product of the
// position and the frequency, as Hugging Face forms it, and its cosine and sine are tabled once per call.
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/workspace.h"

namespace ferry::kernels::cpu {
namespace {

// cos and sin of every (position, pair): (T, hs/2) each, in the op's workspace.
struct RopeTable {
  const float* cos;
  const float* sin;
};

RopeTable rope_table(const RopeShape& s) {
  const int64_t h2 = s.hs / 2;
  float* cos = workspace(Scratch::Op, 2 * s.T * h2 * 4);
  float* sin = cos + s.T * h2;
  for (int64_t i = 0; i < h2; ++i) {
    const float inv_freq = rope_inv_freq(i, s.hs, s.scaling);
    for (int64_t t = 0; t < s.T; ++t) {
      const float angle = static_cast<float>(s.position0 + t) * inv_freq;
      cos[t * h2 + i] = std::cos(angle);
      sin[t * h2 + i] = std::sin(angle);
    }
  }
  return {cos, sin};
}

// out = the rotation of x by `sign` times each angle (1: forward; -1: its transpose, for backward), written
// (accumulate false) or added (true).
void rotate(float* out, const float* x, const RopeShape& s, float sign, bool accumulate) {
  if (s.hs % 2 != 0)
    throw std::invalid_argument("rope: head size " + std::to_string(s.hs) +
                                " is odd; rotary embeddings pair element i of a head with i + head_size/2, so "
                                "the head size (hidden_size / num_attention_heads) must be even");
  const RopeTable table = rope_table(s);
  const int64_t h2 = s.hs / 2;
  parallel_chunks(s.B * s.T, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* cos = table.cos + (r % s.T) * h2;
      const float* sin = table.sin + (r % s.T) * h2;
      for (int64_t h = 0; h < s.H; ++h) {
        const float* xh = x + r * s.row_stride + h * s.hs;
        float* oh = out + r * s.row_stride + h * s.hs;
        for (int64_t i = 0; i < h2; ++i) {
          const float lo = xh[i] * cos[i] - sign * xh[i + h2] * sin[i];
          const float hi = xh[i + h2] * cos[i] + sign * xh[i] * sin[i];
          oh[i] = accumulate ? oh[i] + lo : lo;
          oh[i + h2] = accumulate ? oh[i + h2] + hi : hi;
        }
      }
    }
  });
}

}  // namespace

void rope_forward(float* out, const float* x, const RopeShape& s) { rotate(out, x, s, 1.0f, false); }

void rope_backward(float* dx, const float* dout, const RopeShape& s, bool accumulate) {
  rotate(dx, dout, s, -1.0f, accumulate);
}

}  // namespace ferry::kernels::cpu
