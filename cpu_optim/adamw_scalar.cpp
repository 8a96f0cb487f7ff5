// The portable path: one element at a time, by the rules of kernels/adamw_math.h and foundation/precision.h.
// Also the tail of the AVX2 path, and the reference the wide paths are tested against.
#include <cstring>

#include "foundation/precision.h"
#include "cpu_optim/kernels.h"

namespace ferry::cpu_optim::detail {

float load_grad(const void* grad, DType type, size_t i) {
  switch (type) {
    case DType::F32: return static_cast<const float*>(grad)[i];
    case DType::BF16: return bf16_to_float(static_cast<const uint16_t*>(grad)[i]);
    case DType::F16: return half_to_float(static_cast<const uint16_t*>(grad)[i]);
    case DType::I32: break;  // gradients are never integers (CpuAdamW refuses them)
  }
  return 0;
}

void store_upload(const KernelArgs& a, size_t i, float p) {
  switch (a.upload_type) {
    case DType::F32: static_cast<float*>(a.upload)[i] = p; break;
    case DType::F16: static_cast<uint16_t*>(a.upload)[i] = float_to_half(p); break;
    case DType::BF16:
      static_cast<uint16_t*>(a.upload)[i] =
          a.rounding == Rounding::Stochastic
              ? float_to_bf16_stochastic(p, random_bits(a.c.random_key, static_cast<uint32_t>(i)))
              : float_to_bf16(p);
      break;
    case DType::I32: break;  // never a copy of weights (CpuAdamW refuses it)
  }
}

void adamw_scalar(const KernelArgs& a, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) {
    adamw_element(a.param[i], a.m[i], a.v[i], load_grad(a.grad, a.grad_type, i), a.c);
    if (a.upload) store_upload(a, i, a.param[i]);
  }
}

void compact_scalar(const CompactArgs& a, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i)
    compact_element(a.param[i], a.m[i], a.v[i], load_grad(a.grad, a.grad_type, i), a.c,
                    random_bits(a.c.random_key, a.first_index + static_cast<uint32_t>(i)));
}

double sum_squares_scalar(const void* grad, DType type, size_t begin, size_t end) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) {
    const double g = load_grad(grad, type, i);
    s += g * g;
  }
  return s;
}

}  // namespace ferry::cpu_optim::detail
