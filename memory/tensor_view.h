// TensorView: a typed window onto memory someone else owns (pointer + shape + dtype).
#pragma once

#include <cstdint>
#include <vector>

#include "memory/dtype.h"

namespace ferry::memory {

struct TensorView {
  void* data = nullptr;
  std::vector<int64_t> shape;
  DType dtype = DType::F32;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t bytes() const { return numel() * dtype_bytes(dtype); }
  template <class T> T* as() const { return static_cast<T*>(data); }
};

}  // namespace ferry::memory
