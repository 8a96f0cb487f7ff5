// Token + learned position embedding (GPT-2's wte/wpe; BERT adds its token-type row; Llama has no position
// table: wpe null), forward and backward.
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace ferry::kernels::cpu {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B,
                       int64_t T, int64_t C, const float* type) {
  parallel_chunks(B * T, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* tok = wte + static_cast<int64_t>(tokens[r]) * C;
      float* o = out + r * C;
      if (!wpe) {  // positions enter elsewhere (Llama's rotary embeddings)
        for (int64_t c = 0; c < C; ++c) o[c] = tok[c];
        continue;
      }
      const float* pos = wpe + (r % T) * C;
      if (type)
        for (int64_t c = 0; c < C; ++c) o[c] = (tok[c] + type[c]) + pos[c];
      else
        for (int64_t c = 0; c < C; ++c) o[c] = tok[c] + pos[c];
    }
  });
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                        int64_t T, int64_t C, float* dtype) {
  if (!dwte && !dwpe && !dtype) return;  // every table frozen
  // Split over channels, not tokens: two tokens may share a row of wte, never a channel block.
  parallel_chunks(C, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < B * T; ++r) {
      const float* d = dout + r * C;
      if (dwte) {  // null: a frozen table
        float* gt = dwte + static_cast<int64_t>(tokens[r]) * C;
        for (int64_t c = c0; c < c1; ++c) gt[c] += d[c];
      }
      if (dwpe) {
        float* gp = dwpe + (r % T) * C;
        for (int64_t c = c0; c < c1; ++c) gp[c] += d[c];
      }
      if (dtype)
        for (int64_t c = c0; c < c1; ++c) dtype[c] += d[c];
    }
  });
}

}  // namespace ferry::kernels::cpu
