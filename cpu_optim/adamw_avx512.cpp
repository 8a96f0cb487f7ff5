// The AVX-512 path (compiled with AVX-512 flags for this file only; chosen at run time): 16 elements per
// iteration, masked loads and stores for the tail and for unaligned or odd sizes. The arithmetic is the
// scalar path's, operation for operation (the same explicit FMAs, nothing contracted), so every path gives bitwise the
// same result.
#include <immintrin.h>

#include <cstdint>

#include "cpu_optim/isa.h"
#include "cpu_optim/kernels.h"

namespace ferry::cpu_optim::detail {
namespace {

inline __m512 load_bf16x16(const uint16_t* p, __mmask16 k) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, p)), 16));
}

__m512 load_grad16(const void* grad, DType type, size_t i, __mmask16 k) {
  switch (type) {
    case DType::F32: return _mm512_maskz_loadu_ps(k, static_cast<const float*>(grad) + i);
    case DType::BF16: return load_bf16x16(static_cast<const uint16_t*>(grad) + i, k);
    case DType::F16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, static_cast<const uint16_t*>(grad) + i));
    case DType::I32: break;  // gradients are never integers (CpuAdamW refuses them)
  }
  return _mm512_setzero_ps();
}

// lowbias32 of (index ^ key) for the 16 lanes i .. i+15 (see random_bits in foundation/precision.h).
__m512i random16(uint32_t key, uint32_t i) {
  __m512i x = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(i)),
                               _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  x = _mm512_xor_si512(x, _mm512_set1_epi32(static_cast<int>(key)));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(0x7feb352d));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(static_cast<int>(0x846ca68bu)));
  return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
}

// bf16 by integer rounding (nearest-even, or stochastic with the bits of elements index .. index+15), NaN kept
// quiet: the rules of foundation/precision.h.
__m256i to_bf16(__m512 p, bool stochastic, uint32_t key, uint32_t index) {
  const __m512i bits = _mm512_castps_si512(p);
  const __m512i hi = _mm512_srli_epi32(bits, 16);
  __m512i add;
  if (stochastic) {
    const __m512i abs = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
    const __mmask16 inf = _mm512_cmpeq_epi32_mask(abs, _mm512_set1_epi32(0x7f800000));
    add = _mm512_maskz_and_epi32(static_cast<__mmask16>(~inf), random16(key, index), _mm512_set1_epi32(0xffff));
  } else {
    add = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1)));
  }
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, add), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q);
  r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(r);
}

// The step's coefficients, broadcast once per call (loading them inside the loop would repeat the loads
// after every store, as a float store may alias them).
struct Coefficients16 {
  __m512 beta1, omb1, beta2, omb2, decay, step_size, inv_bc2_sqrt, eps, scale;
  explicit Coefficients16(const AdamWCoefficients& c)
      : beta1(_mm512_set1_ps(c.beta1)), omb1(_mm512_set1_ps(c.one_minus_beta1)), beta2(_mm512_set1_ps(c.beta2)),
        omb2(_mm512_set1_ps(c.one_minus_beta2)), decay(_mm512_set1_ps(c.decay)), step_size(_mm512_set1_ps(c.step_size)),
        inv_bc2_sqrt(_mm512_set1_ps(c.inv_bc2_sqrt)), eps(_mm512_set1_ps(c.eps)), scale(_mm512_set1_ps(c.grad_scale)) {}
};

// The copy-out of 16 new weights (fewer under the tail mask k). The upload copy is only read again by the
// DMA engine: aligned full vectors stream past the caches, which also saves reading each line before
// writing it.
template <bool kMasked>
inline void store_upload16_f32(const KernelArgs& a, __m512 p, size_t i, __mmask16 k) {
  float* out = static_cast<float*>(a.upload) + i;
  if (kMasked)
    _mm512_mask_storeu_ps(out, k, p);
  else if ((reinterpret_cast<uintptr_t>(out) & 63) == 0)
    _mm512_stream_ps(out, p);
  else
    _mm512_storeu_ps(out, p);
}

template <bool kMasked>
inline void store_upload16(const KernelArgs& a, __m512 p, size_t i, __mmask16 k) {
  if (a.upload_type == DType::F32) {
    store_upload16_f32<kMasked>(a, p, i, k);
    return;
  }
  __m256i h;
  if (a.upload_type == DType::F16)
    h = _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  else h = to_bf16(p, a.rounding == Rounding::Stochastic, a.c.random_key, static_cast<uint32_t>(i));
  auto* out = static_cast<uint16_t*>(a.upload) + i;
  if (kMasked)
    _mm256_mask_storeu_epi16(out, k, h);
  else if ((reinterpret_cast<uintptr_t>(out) & 31) == 0)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out), h);
  else
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), h);
}

// adamw_element on 16 lanes; g is unscaled.
inline void adamw16_math(const Coefficients16& c, __m512 g, __m512& p, __m512& m, __m512& v) {
  g = _mm512_mul_ps(g, c.scale);
  m = _mm512_fmadd_ps(c.beta1, m, _mm512_mul_ps(c.omb1, g));
  v = _mm512_fmadd_ps(c.beta2, v, _mm512_mul_ps(_mm512_mul_ps(c.omb2, g), g));
  const __m512 denom = _mm512_fmadd_ps(_mm512_sqrt_ps(v), c.inv_bc2_sqrt, c.eps);
  p = _mm512_fnmadd_ps(c.step_size, _mm512_div_ps(m, denom), _mm512_mul_ps(p, c.decay));
}

// One vector of 16 elements (fewer under the tail mask k).
template <bool kMasked>
inline void adamw16(const KernelArgs& a, const Coefficients16& c, size_t i, __mmask16 k) {
  __m512 m = kMasked ? _mm512_maskz_loadu_ps(k, a.m + i) : _mm512_loadu_ps(a.m + i);
  __m512 v = kMasked ? _mm512_maskz_loadu_ps(k, a.v + i) : _mm512_loadu_ps(a.v + i);
  __m512 p = kMasked ? _mm512_maskz_loadu_ps(k, a.param + i) : _mm512_loadu_ps(a.param + i);
  adamw16_math(c, load_grad16(a.grad, a.grad_type, i, k), p, m, v);
  if (kMasked) {
    _mm512_mask_storeu_ps(a.m + i, k, m);
    _mm512_mask_storeu_ps(a.v + i, k, v);
    _mm512_mask_storeu_ps(a.param + i, k, p);
  } else {
    _mm512_storeu_ps(a.m + i, m);
    _mm512_storeu_ps(a.v + i, v);
    _mm512_storeu_ps(a.param + i, p);
  }
  if (a.upload) store_upload16<kMasked>(a, p, i, k);
}

// 16 bf16 values stored to p: whole, or under the tail mask k. Whole vectors take a plain store: AMD's Zen
// cores run a masked store to memory far slower than a plain one (this kernel at 929 Mparams/s on one Zen 5
// core with every store masked, below the AVX2 kernel's 1654).
template <bool kMasked>
inline void store_bf16x16(uint16_t* p, __mmask16 k, __m256i values) {
  if (kMasked) _mm256_mask_storeu_epi16(p, k, values);
  else _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), values);
}

// The compact update of 16 elements (fewer under the tail mask k): bf16 in and out, to_bf16's rounding.
template <bool kMasked>
inline void compact16(const CompactArgs& a, const Coefficients16& c, size_t i, __mmask16 k) {
  __m512 m = load_bf16x16(a.m + i, k), v = load_bf16x16(a.v + i, k), p = load_bf16x16(a.param + i, k);
  adamw16_math(c, load_grad16(a.grad, a.grad_type, i, k), p, m, v);
  store_bf16x16<kMasked>(a.m + i, k, to_bf16(m, false, 0, 0));
  store_bf16x16<kMasked>(a.v + i, k, to_bf16(v, false, 0, 0));
  store_bf16x16<kMasked>(a.param + i, k, to_bf16(p, true, a.c.random_key, a.first_index + static_cast<uint32_t>(i)));
}

}  // namespace

void compact_avx512(const CompactArgs& a, size_t begin, size_t end) {
  const Coefficients16 c(a.c);
  size_t i = begin;
  for (; i + 16 <= end; i += 16) compact16<false>(a, c, i, 0xffff);
  if (i < end) compact16<true>(a, c, i, static_cast<__mmask16>((1u << (end - i)) - 1));
}

// The bf16 copy-out takes to_bf16's integer rounding, not AVX512-BF16's conversion instruction: that one flushes
// subnormal weights to zero, where the scalar path rounds them, and it was no faster here (bf16 gradients and copy,
// 10M parameters, Zen 5: 1972-2103 Mparam/s on one thread with it, 2119-2149 without).
void adamw_avx512(const KernelArgs& a, size_t begin, size_t end) {
  const Coefficients16 c(a.c);
  size_t i = begin;
  for (; i + 16 <= end; i += 16) adamw16<false>(a, c, i, 0xffff);
  if (i < end) adamw16<true>(a, c, i, static_cast<__mmask16>((1u << (end - i)) - 1));
  if (a.upload) _mm_sfence();  // streaming stores are visible to other threads once the tile returns
}

double sum_squares_avx512(const void* grad, DType type, size_t begin, size_t end) {
  __m512d acc0 = _mm512_setzero_pd(), acc1 = _mm512_setzero_pd();
  for (size_t i = begin; i < end; i += 16) {
    const __mmask16 k = end - i >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (end - i)) - 1);
    const __m512 g = load_grad16(grad, type, i, k);
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(g));
    const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(g), 1)));
    acc0 = _mm512_fmadd_pd(lo, lo, acc0);
    acc1 = _mm512_fmadd_pd(hi, hi, acc1);
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(acc0, acc1));
}

}  // namespace ferry::cpu_optim::detail
