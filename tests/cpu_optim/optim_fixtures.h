// Shared by the cpu_optim tests: gradients of each dtype with their exact fp32 values, optimizer state on
// 64-byte aligned memory (so that the tests choose which stores are aligned), upload copies of any dtype,
// and the ISA paths this CPU runs.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <ostream>
#include <string>
#include <vector>

#include "cpu_optim/adamw.h"
#include "foundation/precision.h"
#include "foundation/rng.h"

namespace ferry::cpu_optim::fixtures {

inline const AdamWHyper kHyper{1e-2, 0.9, 0.95, 1e-8, 0.1};

// The kernels stream only to aligned addresses: 64-byte aligned storage lets a test pick an offset for
// each kind of store.
template <class T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <class U>
  explicit Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  friend bool operator==(const Aligned64&, const Aligned64&) { return true; }
};
template <class T>
using AlignedVector = std::vector<T, Aligned64<T>>;

inline const char* dtype_name(DType t) { return t == DType::F32 ? "f32" : t == DType::BF16 ? "bf16" : t == DType::F16 ? "f16" : "i32"; }

// Gradients of a dtype, and their exact fp32 values.
struct Grads {
  std::vector<float> f32;
  std::vector<uint16_t> half;
  DType type;
  const void* data() const { return type == DType::F32 ? static_cast<const void*>(f32.data()) : half.data(); }
  const void* at(size_t i) const { return static_cast<const std::byte*>(data()) + i * dtype_bytes(type); }
};

inline Grads make_grads(Rng& rng, size_t n, DType type, double std = 0.05) {
  Grads g{std::vector<float>(n), std::vector<uint16_t>(n), type};
  for (size_t i = 0; i < n; ++i) {
    const float x = static_cast<float>(rng.normal() * std);
    if (type == DType::BF16) {
      g.half[i] = float_to_bf16(x), g.f32[i] = bf16_to_float(g.half[i]);
    } else if (type == DType::F16) {
      g.half[i] = float_to_half(x), g.f32[i] = half_to_float(g.half[i]);
    } else {
      g.f32[i] = x;
    }
  }
  return g;
}

// Master weights, moments and an upload copy; the upload's storage has 4 bytes per element, so it holds a
// copy of any dtype.
struct State {
  AlignedVector<float> p, m, v;
  AlignedVector<uint32_t> upload;

  void* upload_at(DType t, size_t i) { return reinterpret_cast<std::byte*>(upload.data()) + i * dtype_bytes(t); }
  // Element i of the copy as stored, widened.
  uint32_t upload_bits(DType t, size_t i) const {
    if (t == DType::F32) return upload[i];
    uint16_t h;
    std::memcpy(&h, reinterpret_cast<const std::byte*>(upload.data()) + 2 * i, 2);
    return h;
  }
  Bucket bucket(const Grads& g, size_t offset, size_t n, bool with_upload, DType upload_type) {
    return {{p.data() + offset, n}, {m.data() + offset, n}, {v.data() + offset, n}, g.at(offset), g.type,
            with_upload ? upload_at(upload_type, offset) : nullptr, upload_type};
  }
};

inline State make_state(Rng& rng, size_t n) {
  State s{AlignedVector<float>(n), AlignedVector<float>(n), AlignedVector<float>(n), AlignedVector<uint32_t>(n)};
  for (size_t i = 0; i < n; ++i) {
    s.p[i] = static_cast<float>(rng.normal());
    s.m[i] = static_cast<float>(rng.normal() * 0.01);
    s.v[i] = static_cast<float>(std::abs(rng.normal()) * 1e-3);
  }
  return s;
}

// What a correct copy-out of weight p holds, widened as State::upload_bits.
inline uint32_t copy_out_of(float p, DType t) {
  if (t == DType::F32) return std::bit_cast<uint32_t>(p);
  return t == DType::F16 ? float_to_half(p) : float_to_bf16(p);
}

inline CpuAdamW optimizer(Isa isa, Rounding rounding = Rounding::NearestEven, int threads = 2) {
  return CpuAdamW(AdamWOptions{kHyper, to_string(isa), threads, rounding, 42});
}

// The ISA paths under test: every path this CPU can run. FERRY_CPU_ISA would override the request, so the
// tests clear it.
inline std::vector<Isa> paths() {
  unsetenv("FERRY_CPU_ISA");
  return supported_isas();
}

// For tests of one path each: skips, saying why, a path this CPU cannot run.
#define FERRY_SKIP_UNLESS_SUPPORTED(isa)                                                            \
  do {                                                                                              \
    unsetenv("FERRY_CPU_ISA");                                                                      \
    if (!isa_supported(isa)) GTEST_SKIP() << "this CPU cannot run the " << to_string(isa) << " path"; \
  } while (0)

// Calls f, which must throw an Error whose message contains `says`.
template <class Error, class F>
void expect_error(F&& f, const std::string& says) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one saying '" << says << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

inline std::string isa_name(const ::testing::TestParamInfo<Isa>& info) { return to_string(info.param); }

}  // namespace ferry::cpu_optim::fixtures

namespace ferry::cpu_optim {
// GoogleTest prints a path by its name (found by argument-dependent lookup, so next to Isa).
inline void PrintTo(Isa isa, std::ostream* os) { *os << to_string(isa); }
}  // namespace ferry::cpu_optim
