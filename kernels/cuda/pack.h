// Packs of W consecutive elements, the unit of the kernels' vector paths: 16 bytes of storage (8 bf16/fp16
// or 4 fp32) read or written by one 16-byte access on the device and by W scalar accesses in the host twins,
// widened to fp32 lanes; W = 1 is the scalar path. The lanes hold the same values either way.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "foundation/precision.h"

namespace ferry::kernels::cuda {

constexpr int kPackBytes = 16;

// Elements of storage T in one 16-byte access.
template <class T>
constexpr int kPackWidth = kPackBytes / static_cast<int>(sizeof(T));

#ifndef __CUDA_ARCH__
// The host twins hold the device's precondition of a 16-byte access, an address 16-byte aligned (the device
// faults with "misaligned address"), so that a twin run on a vector path fails where its kernel would.
template <class T>
void expect_pack_aligned(const T* at) {
  if (reinterpret_cast<uintptr_t>(at) % kPackBytes != 0)
    throw std::logic_error(
        "a 16-byte pack access at an address that is not 16-byte aligned: the launch's path "
        "decision (launch.h, rope_ops.h) let a misaligned pack through");
}
#endif

// v[0, W) = p[i, i + W) widened. A 16-byte access needs p + i 16-byte aligned (the launch checks the pointers and
// keeps i a multiple of W).
template <int W, class T>
FERRY_HD void load_pack(const T* p, int64_t i, float* v) {
  T lanes[W];
#ifdef __CUDA_ARCH__
  if constexpr (W * sizeof(T) == kPackBytes) {
    const uint4 bits = *reinterpret_cast<const uint4*>(p + i);
    memcpy(lanes, &bits, kPackBytes);
  } else {
    for (int j = 0; j < W; ++j) lanes[j] = p[i + j];
  }
#else
  if constexpr (W * sizeof(T) == kPackBytes) expect_pack_aligned(p + i);
  for (int j = 0; j < W; ++j) lanes[j] = p[i + j];
#endif
  for (int j = 0; j < W; ++j) v[j] = load(lanes, j);
}

// p[i, i + lanes) = v rounded to T; a full pack (lanes == W) in one 16-byte access, a partial one (the end of a
// row that is not a multiple of W) lane by lane, so nothing past it is written.
template <int W, class T>
FERRY_HD void store_pack(T* p, int64_t i, const float* v, int lanes = W) {
#ifdef __CUDA_ARCH__
  if constexpr (W * sizeof(T) == kPackBytes) {
    if (lanes == W) {
      T packed[W];
      for (int j = 0; j < W; ++j) store(packed, j, v[j]);
      uint4 bits;
      memcpy(&bits, packed, kPackBytes);
      *reinterpret_cast<uint4*>(p + i) = bits;
      return;
    }
  }
#else
  if constexpr (W * sizeof(T) == kPackBytes)
    if (lanes == W) expect_pack_aligned(p + i);
#endif
  for (int j = 0; j < W; ++j)
    if (j < lanes) store(p, i + j, v[j]);
}

// v[0, lanes) = p[i, i + lanes): a full pack in one access, a partial one lane by lane (nothing past it read).
template <int W, class T>
FERRY_HD void load_lanes(const T* p, int64_t i, float* v, int lanes) {
  if (lanes == W) return load_pack<W>(p, i, v);
  for (int j = 0; j < W; ++j)
    if (j < lanes) v[j] = load(p, i + j);
}

// A backward op's write of a pack of activation-gradient lanes (store_grad's rule): added to what is there while
// `accumulate`, else written over it without reading it.
template <int W, class T>
FERRY_HD void store_grad_pack(T* p, int64_t i, float* v, bool accumulate, int lanes = W) {
  if (accumulate) {
    float old[W];
    load_lanes<W>(p, i, old, lanes);
    for (int j = 0; j < W; ++j)
      if (j < lanes) v[j] = old[j] + v[j];
  }
  store_pack<W>(p, i, v, lanes);
}

// Whether every pointer (null ones aside: absent operands) is 16-byte aligned, as the vector paths need.
template <class... P>
bool pack_aligned(const P*... p) {
  return ((reinterpret_cast<uintptr_t>(p) % kPackBytes == 0) && ...);
}

template <int W>
using Width = std::integral_constant<int, W>;

// Calls f(Width<1>{}) or f(Width<kPackWidth<T>>{}) as `width` says: a path's width as a compile-time constant,
// so the device code has its 16-byte accesses and unrolled lanes.
template <class T, class F>
void with_width(int width, F&& f) {
  if (width == 1) f(Width<1>{});
  else f(Width<kPackWidth<T>>{});
}

}  // namespace ferry::kernels::cuda
