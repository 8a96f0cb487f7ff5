// Which vector instruction set the CPU kernels use: detected from CPUID at run time, overridable by
// config (optim.isa) and by the FERRY_CPU_ISA environment variable, so tests can run every path.
#pragma once

#include <string>
#include <vector>

namespace ferry::cpu_optim {

enum class Isa { Scalar, Avx2, Avx512 };

const char* to_string(Isa isa);
bool isa_supported(Isa isa);          // the CPU and OS can run this path
std::vector<Isa> supported_isas();    // widest last
Isa best_isa();

// Resolves a request: "auto" (or empty) picks best_isa(); FERRY_CPU_ISA, when set, replaces the request.
// A name the CPU cannot run is an error that lists what it can.
Isa resolve_isa(const std::string& requested);

}  // namespace ferry::cpu_optim
