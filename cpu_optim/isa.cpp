// ISA detection (GCC's CPUID helpers also check that the OS saves the wide registers) and selection.
#include "cpu_optim/isa.h"

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

bool isa_supported(Isa isa) {
  __builtin_cpu_init();
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case Isa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma");
  }
  return false;
}

bool cpu_has_avx512_bf16() {
  __builtin_cpu_init();
  return isa_supported(Isa::Avx512) && __builtin_cpu_supports("avx512bf16");
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
