// The AVX2 + FMA + F16C path (compiled with those flags for this file only; chosen at run time):
// 8 elements per iteration, the tail through the scalar code. Same arithmetic as the scalar path,
// operation for operation (the same explicit FMAs), so the results are bitwise the same.
#include <immintrin.h>

#include <cstdint>

#include "cpu_optim/kernels.h"

namespace ferry::cpu_optim::detail {
namespace {

__m256 load_bf16x8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

__m256 load_grad8(const void* grad, DType type, size_t i) {
  switch (type) {
    case DType::F32: return _mm256_loadu_ps(static_cast<const float*>(grad) + i);
    case DType::BF16: return load_bf16x8(static_cast<const uint16_t*>(grad) + i);
    case DType::F16:
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(grad) + i)));
    case DType::I32: break;  // gradients are never integers (CpuAdamW refuses them)
  }
  return _mm256_setzero_ps();
}

// random_bits (foundation/precision.h's hash) of the 8 indices.
__m256i hash8(uint32_t key, __m256i x) {
  x = _mm256_xor_si256(x, _mm256_set1_epi32(static_cast<int>(key)));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb352d));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int>(0x846ca68bu)));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

// bf16 by integer rounding (nearest-even, or stochastic with the bits of `random`), NaN kept quiet: the rules
// of foundation/precision.h, each lane's result in its low 16 bits (ready for packus).
__m256i bf16_bits(__m256 p, bool stochastic, __m256i random) {
  const __m256i bits = _mm256_castps_si256(p);
  const __m256i hi = _mm256_srli_epi32(bits, 16);
  __m256i add;
  if (stochastic) {
    const __m256i abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
    const __m256i inf = _mm256_cmpeq_epi32(abs, _mm256_set1_epi32(0x7f800000));
    add = _mm256_andnot_si256(inf, _mm256_and_si256(random, _mm256_set1_epi32(0xffff)));
  } else {
    add = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(hi, _mm256_set1_epi32(1)));
  }
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(bits, add), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(p, p, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
}
__m256i round_bits(__m256 p) { return bf16_bits(p, false, _mm256_setzero_si256()); }
// Stochastic, lane k hashing element index + offsets[k].
__m256i stochastic_bits(__m256 p, uint32_t key, uint32_t index, __m256i offsets) {
  return bf16_bits(p, true, hash8(key, _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(index)), offsets)));
}

// 8 lanes of bf16, elements index .. index+7.
__m128i to_bf16(__m256 p, bool stochastic, uint32_t key, uint32_t index) {
  const __m256i r =
      stochastic ? stochastic_bits(p, key, index, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)) : round_bits(p);
  // 8 x u32 (each <= 0xffff) -> 8 x u16: pack within 128-bit lanes, then gather the two halves.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0b1000);
  return _mm256_castsi256_si128(packed);
}

// The copy-out of 8 new weights. Only the DMA engine reads the copy again: aligned stores stream past the
// caches, which also saves reading each line before writing it.
void store_upload8(const KernelArgs& a, __m256 p, size_t i) {
  if (a.upload_type == DType::F32) {
    float* out = static_cast<float*>(a.upload) + i;
    if ((reinterpret_cast<uintptr_t>(out) & 31) == 0) _mm256_stream_ps(out, p);
    else _mm256_storeu_ps(out, p);
    return;
  }
  const __m128i h = a.upload_type == DType::F16
                        ? _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
                        : to_bf16(p, a.rounding == Rounding::Stochastic, a.c.random_key, static_cast<uint32_t>(i));
  auto* out = reinterpret_cast<__m128i*>(static_cast<uint16_t*>(a.upload) + i);
  if ((reinterpret_cast<uintptr_t>(out) & 15) == 0) _mm_stream_si128(out, h);
  else _mm_storeu_si128(out, h);
}

// The step's coefficients, broadcast once per call.
struct Coefficients8 {
  __m256 beta1, omb1, beta2, omb2, decay, step_size, inv_bc2_sqrt, eps, scale;
  explicit Coefficients8(const AdamWCoefficients& c)
      : beta1(_mm256_set1_ps(c.beta1)), omb1(_mm256_set1_ps(c.one_minus_beta1)), beta2(_mm256_set1_ps(c.beta2)),
        omb2(_mm256_set1_ps(c.one_minus_beta2)), decay(_mm256_set1_ps(c.decay)), step_size(_mm256_set1_ps(c.step_size)),
        inv_bc2_sqrt(_mm256_set1_ps(c.inv_bc2_sqrt)), eps(_mm256_set1_ps(c.eps)), scale(_mm256_set1_ps(c.grad_scale)) {}
};

// adamw_element on 8 lanes; g is unscaled.
inline void adamw8(const Coefficients8& c, __m256 g, __m256& p, __m256& m, __m256& v) {
  g = _mm256_mul_ps(g, c.scale);
  m = _mm256_fmadd_ps(c.beta1, m, _mm256_mul_ps(c.omb1, g));
  v = _mm256_fmadd_ps(c.beta2, v, _mm256_mul_ps(_mm256_mul_ps(c.omb2, g), g));
  const __m256 denom = _mm256_fmadd_ps(_mm256_sqrt_ps(v), c.inv_bc2_sqrt, c.eps);
  p = _mm256_fnmadd_ps(c.step_size, _mm256_div_ps(m, denom), _mm256_mul_ps(p, c.decay));
}

void store_bf16x8(uint16_t* p, __m128i h) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h); }

// The training path: bf16 gradients and a bf16 copy-out, 16 elements an iteration so that the copy-out is one
// pack of two rounded vectors, one lane fix-up and one 32-byte store.
void adamw16_bf16(const KernelArgs& a, const Coefficients8& c, size_t begin, size_t end, size_t& i) {
  float* const param = a.param;
  float* const m_out = a.m;
  float* const v_out = a.v;
  const auto* const grad = static_cast<const uint16_t*>(a.grad);
  auto* const upload = static_cast<uint16_t*>(a.upload);
  const bool stochastic = a.rounding == Rounding::Stochastic;
  const __m256i first8 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                next8 = _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15);
  for (i = begin; i + 16 <= end; i += 16) {
    __m256 p0 = _mm256_loadu_ps(param + i), p1 = _mm256_loadu_ps(param + i + 8);
    __m256 m0 = _mm256_loadu_ps(m_out + i), m1 = _mm256_loadu_ps(m_out + i + 8);
    __m256 v0 = _mm256_loadu_ps(v_out + i), v1 = _mm256_loadu_ps(v_out + i + 8);
    adamw8(c, load_bf16x8(grad + i), p0, m0, v0);
    adamw8(c, load_bf16x8(grad + i + 8), p1, m1, v1);
    _mm256_storeu_ps(m_out + i, m0), _mm256_storeu_ps(m_out + i + 8, m1);
    _mm256_storeu_ps(v_out + i, v0), _mm256_storeu_ps(v_out + i + 8, v1);
    _mm256_storeu_ps(param + i, p0), _mm256_storeu_ps(param + i + 8, p1);
    const auto index = static_cast<uint32_t>(i);
    const __m256i r0 = stochastic ? stochastic_bits(p0, a.c.random_key, index, first8) : round_bits(p0);
    const __m256i r1 = stochastic ? stochastic_bits(p1, a.c.random_key, index, next8) : round_bits(p1);
    // packus interleaves the two per 128-bit lane (0-3, 8-11, 4-7, 12-15): quadwords 0, 2, 1, 3 restore the order.
    const __m256i h = _mm256_permute4x64_epi64(_mm256_packus_epi32(r0, r1), 0b11011000);
    auto* out = reinterpret_cast<__m256i*>(upload + i);
    if ((reinterpret_cast<uintptr_t>(out) & 31) == 0) _mm256_stream_si256(out, h);
    else _mm256_storeu_si256(out, h);
  }
}

}  // namespace

void adamw_avx2(const KernelArgs& a, size_t begin, size_t end) {
  const Coefficients8 c(a.c);
  size_t i = begin;
  if (a.upload && a.upload_type == DType::BF16 && a.grad_type == DType::BF16) adamw16_bf16(a, c, begin, end, i);
  for (; i + 8 <= end; i += 8) {
    __m256 m = _mm256_loadu_ps(a.m + i);
    __m256 v = _mm256_loadu_ps(a.v + i);
    __m256 p = _mm256_loadu_ps(a.param + i);
    adamw8(c, load_grad8(a.grad, a.grad_type, i), p, m, v);
    _mm256_storeu_ps(a.m + i, m);
    _mm256_storeu_ps(a.v + i, v);
    _mm256_storeu_ps(a.param + i, p);
    if (a.upload) store_upload8(a, p, i);
  }
  if (a.upload) _mm_sfence();  // streaming stores are visible to other threads once the tile returns
  adamw_scalar(a, i, end);
}

namespace {

// The compact update, 16 elements an iteration with bf16 gradients. Widening by interleaving with zeros keeps
// each 128-bit lane's elements: the low vector holds elements 0-3 and 8-11, the high one 4-7 and 12-15, and
// packing the two back (per lane, as packus does) restores the order, so no lane crossing is needed either
// way; the stochastic rounding hashes each element's own index, as the scalar path does.
void compact16_bf16(const CompactArgs& a, const Coefficients8& c, size_t begin, size_t end, size_t& i) {
  uint16_t* const param = a.param;
  uint16_t* const m_out = a.m;
  uint16_t* const v_out = a.v;
  const auto* const grad = static_cast<const uint16_t*>(a.grad);
  const __m256i zero = _mm256_setzero_si256();
  const __m256i lo_index = _mm256_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11),
                hi_index = _mm256_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15);
  const auto load16 = [](const uint16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); };
  const auto lo = [&](__m256i h) { return _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, h)); };
  const auto hi = [&](__m256i h) { return _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, h)); };
  for (i = begin; i + 16 <= end; i += 16) {
    const __m256i w16 = load16(param + i), m16 = load16(m_out + i), v16 = load16(v_out + i), g16 = load16(grad + i);
    __m256 p0 = lo(w16), p1 = hi(w16), m0 = lo(m16), m1 = hi(m16), v0 = lo(v16), v1 = hi(v16);
    adamw8(c, lo(g16), p0, m0, v0);
    adamw8(c, hi(g16), p1, m1, v1);
    const uint32_t index = a.first_index + static_cast<uint32_t>(i);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(m_out + i), _mm256_packus_epi32(round_bits(m0), round_bits(m1)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(v_out + i), _mm256_packus_epi32(round_bits(v0), round_bits(v1)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(param + i),
                        _mm256_packus_epi32(stochastic_bits(p0, a.c.random_key, index, lo_index),
                                            stochastic_bits(p1, a.c.random_key, index, hi_index)));
  }
}

}  // namespace

void compact_avx2(const CompactArgs& a, size_t begin, size_t end) {
  const Coefficients8 c(a.c);
  size_t i = begin;
  if (a.grad_type == DType::BF16) compact16_bf16(a, c, begin, end, i);
  for (; i + 8 <= end; i += 8) {
    __m256 m = load_bf16x8(a.m + i), v = load_bf16x8(a.v + i), p = load_bf16x8(a.param + i);
    adamw8(c, load_grad8(a.grad, a.grad_type, i), p, m, v);
    store_bf16x8(a.m + i, to_bf16(m, false, 0, 0));
    store_bf16x8(a.v + i, to_bf16(v, false, 0, 0));
    store_bf16x8(a.param + i, to_bf16(p, true, a.c.random_key, a.first_index + static_cast<uint32_t>(i)));
  }
  compact_scalar(a, i, end);
}

double sum_squares_avx2(const void* grad, DType type, size_t begin, size_t end) {
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  size_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256 g = load_grad8(grad, type, i);
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(g));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(g, 1));
    acc0 = _mm256_fmadd_pd(lo, lo, acc0);
    acc1 = _mm256_fmadd_pd(hi, hi, acc1);
  }
  const __m256d acc = _mm256_add_pd(acc0, acc1);
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, acc);
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]) + sum_squares_scalar(grad, type, i, end);
}

}  // namespace ferry::cpu_optim::detail
