// What cuDNN's SDPA graphs are told about our tensors, as pure functions of the shape (attention_cudnn.cpp
// builds its graphs from them; the host tests run a naive attention through the same dims and strides
// against the CPU op): the (B, NH, T, hs) views, the padding mask as key counts, the scratch layout.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "foundation/precision.h"

namespace ferry::kernels::cuda::sdpa {

// A 4-d view: element (b, h, t, c) at sum(index * stride) from the tensor's pointer.
struct View {
  std::array<int64_t, 4> dim, stride;
};

// q: rows row_stride apart (GPT-2's packed qkv: 3C, the k and v pointers C and 2C in); k, v: KV heads (fewer
// than NH in grouped-query attention: cuDNN maps query head h to key/value head h / (NH/KV), as Ferry does),
// rows kv_row_stride apart; out, dout and the backward's dq buffer: (B,T,C); its dk, dv buffers (B,T,KV*hs);
// stats (B,NH,T,1) fp32, cuDNN's per-query log-sum-exp. KV, kv_row_stride 0: NH, row_stride.
struct Views {
  View q, kv, out, kv_grads, stats;
};

inline Views views(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t row_stride, int64_t KV = 0,
                   int64_t kv_row_stride = 0) {
  const int64_t hs = C / NH, kv = KV ? KV : NH, krs = kv_row_stride ? kv_row_stride : row_stride;
  return {{{B, NH, T, hs}, {T * row_stride, hs, row_stride, 1}},
          {{B, kv, T, hs}, {T * krs, hs, krs, 1}},
          {{B, NH, T, hs}, {T * C, hs, C, 1}},
          {{B, kv, T, hs}, {T * kv * hs, hs, kv * hs, 1}},
          {{B, NH, T, 1}, {NH * T, T, 1, 1}}};
}

inline int64_t offset(const View& v, int64_t b, int64_t h, int64_t t, int64_t c) {
  return b * v.stride[0] + h * v.stride[1] + t * v.stride[2] + c * v.stride[3];
}

// cuDNN's padding mask keeps keys [0, seq_kv[b]) of batch row b: the keys before the first padding (BERT's
// batches pad at the end; a mask with holes is the flash kernel's). Queries: all T.
FERRY_HD inline int32_t keys_before_padding(const int32_t* mask_row, int64_t T) {
  int64_t n = 0;
  while (n < T && mask_row[n] != 0) ++n;
  return static_cast<int32_t>(n);
}

// cuDNN writes dq into a (B,T,C) buffer, dk and dv into (B,T,KV*hs) ones; element e of one, C its channels,
// goes to the view with rows row_stride apart at this index (the backward adds it there, or copies it when the
// op is told not to accumulate).
FERRY_HD inline int64_t view_index(int64_t e, int64_t C, int64_t row_stride) { return (e / C) * row_stride + e % C; }

// The scratch of one call: [seq_q (B) | seq_kv (B) | dq (B*T*C) | dk | dv (B*T*kv_channels each; dq, dk, dv
// backward only) | cuDNN's workspace], every part 256-byte aligned.
struct Scratch {
  size_t seq_q, seq_kv, dq, dk, dv, workspace, total;
};

inline size_t align256(size_t n) { return (n + 255) / 256 * 256; }

inline Scratch scratch(int64_t B, int64_t T, int64_t C, int64_t kv_channels, size_t element_bytes, bool backward,
                       size_t workspace) {
  const size_t lens = align256(static_cast<size_t>(B) * sizeof(int32_t));
  const size_t dq = backward ? align256(static_cast<size_t>(B * T * C) * element_bytes) : 0;
  const size_t dkv = backward ? align256(static_cast<size_t>(B * T * kv_channels) * element_bytes) : 0;
  const size_t ws = 2 * lens + dq + 2 * dkv;
  return {0, lens, 2 * lens, 2 * lens + dq, 2 * lens + dq + dkv, ws, ws + align256(workspace)};
}

}  // namespace ferry::kernels::cuda::sdpa
