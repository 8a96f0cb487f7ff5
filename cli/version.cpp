// `ferry --version`, from the build's generated headers (cli/build_info.h.in, cli/git_commit.cmake) and run-time
// probes: the GPUs the CUDA runtime sees, the cuBLASLt they would use, and the CPU AdamW kernel for this CPU.
#include "cli/version.h"

#include <fmt/format.h>

#include <exception>
#include <string>

#include "cli/build_info.h"
#include "cli/git_commit.h"
#include "cpu_optim/isa.h"
#include "engine/device/cuda_devices.h"
#ifdef FERRY_WITH_CUDA
#include "kernels/cuda/cublaslt_library.h"
#endif

namespace ferry::cli {
namespace {

std::string cuda_line() {
#ifdef FERRY_WITH_CUDA
  const char* attention = FERRY_CUDNN_SDPA ? "cuDNN SDPA where libcudnn.so.9 loads, else Ferry's flash kernel"
                                           : "Ferry's flash kernel (cuDNN SDPA not compiled in)";
  // cuBLASLt is opened where a GPU would use it: the line says which file, or why none loads.
  const int gpus = device::cuda_device_count();
  return fmt::format("CUDA: built with CUDA {} for {}; attention: {}; GPUs visible: {}; {}", FERRY_CUDA_TOOLKIT,
                     FERRY_CUDA_ARCHITECTURES, attention, gpus,
                     gpus > 0 ? kernels::cuda::cublaslt_status() : "cuBLASLt: opened at first GPU use");
#else
  return fmt::format("CUDA: not in this build (FERRY_CUDA={}); device: cpu only", FERRY_CUDA_SETTING);
#endif
}

// FERRY_CPU_ISA may name a kernel this CPU cannot run: say so here rather than fail.
std::string adamw_line() {
  try {
    return fmt::format("CPU AdamW: {} kernel", cpu_optim::to_string(cpu_optim::resolve_isa("auto")));
  } catch (const std::exception& e) {
    return fmt::format("CPU AdamW: {}", e.what());
  }
}

}  // namespace

std::string version_text() {
  const std::string commit = FERRY_GIT_COMMIT;
  return fmt::format("ferry {} ({}{} build)\n{}\n{}", FERRY_VERSION, commit.empty() ? "" : "git " + commit + ", ",
                     FERRY_BUILD_TYPE, cuda_line(), adamw_line());
}

}  // namespace ferry::cli
