// ISA detection from CPUID and XGETBV, and selection.
#include "cpu_optim/isa.h"

#include <cpuid.h>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>

namespace ferry::cpu_optim {

const char* to_string(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

namespace {

// CPUID feature bits, and whether the OS saves the AVX / AVX-512 registers (XGETBV), read directly so that
// GCC and clang agree (their __builtin_cpu_supports know different feature names).
struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false, avx512f = false, avx512bw = false, avx512vl = false;
};

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28);
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  uint32_t xcr0 = 0;
  if (osxsave) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = lo;
  }
  const bool os_avx = avx && (xcr0 & 0x6) == 0x6;        // XMM and YMM state
  const bool os_avx512 = os_avx && (xcr0 & 0xE0) == 0xE0;  // opmask, ZMM upper halves, ZMM16-31
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = os_avx && (b & (1u << 5));
    f.avx512f = os_avx512 && (b & (1u << 16));
    f.avx512bw = os_avx512 && (b & (1u << 30));
    f.avx512vl = os_avx512 && (b & (1u << 31));
  }
  f.fma = f.fma && os_avx;
  f.f16c = f.f16c && os_avx;
  return f;
}

const CpuFeatures& features() {
  static const CpuFeatures f = detect();
  return f;
}

}  // namespace

bool isa_supported(Isa isa) {
  const CpuFeatures& f = features();
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return f.avx2 && f.fma && f.f16c;
    case Isa::Avx512: return f.avx512f && f.avx512bw && f.avx512vl && f.fma;
  }
  return false;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

Isa best_isa() { return supported_isas().back(); }

Isa resolve_isa(const std::string& requested) {
  std::string name = requested;
  std::string origin = "optim.isa";
  if (const char* env = std::getenv("FERRY_CPU_ISA"); env && *env) {
    name = env;
    origin = "FERRY_CPU_ISA";
  }
  if (name.empty() || name == "auto") return best_isa();
  std::string can;
  for (Isa isa : supported_isas()) can += (can.empty() ? "" : ", ") + std::string(to_string(isa));
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (name != to_string(isa)) continue;
    if (!isa_supported(isa)) throw std::runtime_error(origin + ": this CPU cannot run '" + name + "'; it supports " + can);
    return isa;
  }
  throw std::runtime_error(origin + ": unknown ISA '" + name + "'; expected auto, scalar, avx2 or avx512 (this CPU: " + can + ")");
}

}  // namespace ferry::cpu_optim
