// The per-ISA kernels behind CpuAdamW, each over elements [begin, end) of a bucket. Internal to cpu_optim.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu_optim/adamw.h"
#include "foundation/precision.h"
#include "kernels/adamw_math.h"

namespace ferry::cpu_optim::detail {

// The element update every ISA path follows, the device AdamW's too.
using kernels::adamw_element;
using kernels::AdamWCoefficients;

struct KernelArgs {
  float* param;
  float* m;
  float* v;
  const void* grad;
  DType grad_type;
  void* upload;  // may be null; else upload_type is BF16, F16 or F32
  DType upload_type;
  Rounding rounding;
  AdamWCoefficients c;
};

void adamw_scalar(const KernelArgs& a, size_t begin, size_t end);
void adamw_avx2(const KernelArgs& a, size_t begin, size_t end);
void adamw_avx512(const KernelArgs& a, size_t begin, size_t end);

// The compact state's bucket (CompactBucket): bf16 bits of the weights, m and v.
struct CompactArgs {
  uint16_t* param;
  uint16_t* m;
  uint16_t* v;
  const void* grad;
  DType grad_type;
  uint32_t first_index;  // of element 0 in the model: the index stochastic rounding hashes
  AdamWCoefficients c;
};

// The compact update of one element: the exact update on the widened values, then m and v rounded to
// nearest even and the weight stochastically (`random`: its element's bits), so that an update smaller than
// half a bf16 ulp still moves the weight in expectation. Every ISA path computes this, operation for operation.
inline void compact_element(uint16_t& w, uint16_t& m, uint16_t& v, float g, const AdamWCoefficients& c,
                            uint32_t random) {
  float wf = bf16_to_float(w), mf = bf16_to_float(m), vf = bf16_to_float(v);
  adamw_element(wf, mf, vf, g, c);
  w = float_to_bf16_stochastic(wf, random), m = float_to_bf16(mf), v = float_to_bf16(vf);
}

void compact_scalar(const CompactArgs& a, size_t begin, size_t end);
void compact_avx2(const CompactArgs& a, size_t begin, size_t end);
void compact_avx512(const CompactArgs& a, size_t begin, size_t end);

// Sum of squares in double; inf/nan make it non-finite.
double sum_squares_scalar(const void* grad, DType type, size_t begin, size_t end);
double sum_squares_avx2(const void* grad, DType type, size_t begin, size_t end);
double sum_squares_avx512(const void* grad, DType type, size_t begin, size_t end);

// One gradient element as fp32 (exact for every type).
float load_grad(const void* grad, DType type, size_t i);
// The copy-out of one element, by the scalar rules of foundation/precision.h.
void store_upload(const KernelArgs& a, size_t i, float p);

}  // namespace ferry::cpu_optim::detail
