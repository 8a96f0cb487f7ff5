// The per-ISA kernels behind CpuAdamW, each over elements [begin, end) of a bucket. Internal to cpu_optim.
#pragma once

#include <cstddef>

#include "cpu_optim/adamw.h"
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

// Sum of squares in double; inf/nan make it non-finite.
double sum_squares_scalar(const void* grad, DType type, size_t begin, size_t end);
double sum_squares_avx2(const void* grad, DType type, size_t begin, size_t end);
double sum_squares_avx512(const void* grad, DType type, size_t begin, size_t end);

// One gradient element as fp32 (exact for every type).
float load_grad(const void* grad, DType type, size_t i);
// The copy-out of one element, by the scalar rules of foundation/precision.h.
void store_upload(const KernelArgs& a, size_t i, float p);

}  // namespace ferry::cpu_optim::detail
