// cublaslt(): libcublasLt opened once, every entry point resolved, or an error that says where it looked.
#include "kernels/cuda/cublaslt_library.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <exception>
#include <stdexcept>
#include <vector>

#include "kernels/cuda/library_search.h"

namespace ferry::kernels::cuda {
namespace {

const std::string kSoname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
// PyTorch's wheels: nvidia-cublas-cu12 keeps it in nvidia/cublas/lib, the CUDA 13 wheels in nvidia/cu13/lib.
const std::string kWheelDir = "nvidia/cu" + std::to_string(CUBLAS_VER_MAJOR) + "/lib";

template <class F>
void resolve(void* lib, const std::string& path, const char* name, F& slot) {
  void* symbol = dlsym(lib, name);
  if (!symbol)
    throw std::runtime_error(
        fmt::format("cuBLASLt: {} has no {}: not the cuBLASLt {} this build needs", path, name, CUBLAS_VER_MAJOR));
  slot = reinterpret_cast<F>(symbol);
}

CublasLtLibrary open_cublaslt() {
  std::vector<std::string> errors;
  void* lib = nullptr;
  CublasLtLibrary l;
  for (const std::string& path :
       library_candidates({"FERRY_CUBLASLT_LIB", kSoname, FERRY_CUDA_LIBRARY_DIR, {"nvidia/cublas/lib", kWheelDir}})) {
    // Never closed: plans and handles may be released at exit, after the loader would have unloaded it.
    if ((lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL))) {
      l.path = path;
      break;
    }
    errors.emplace_back(dlerror());
  }
  if (!lib)
    throw std::runtime_error(
        fmt::format("cuBLASLt: {} did not load ({}); put the folder holding it (the CUDA toolkit's lib, or PyTorch's "
                    "nvidia/cublas/lib) on LD_LIBRARY_PATH, or set FERRY_CUBLASLT_LIB to the file",
                    kSoname, fmt::join(errors, "; ")));
  if (Dl_info info{}; dladdr(dlsym(lib, "cublasLtCreate"), &info) && info.dli_fname) l.path = info.dli_fname;
  resolve(lib, l.path, "cublasLtGetVersion", l.get_version);
  resolve(lib, l.path, "cublasLtGetStatusString", l.status_string);
  resolve(lib, l.path, "cublasLtCreate", l.create);
  resolve(lib, l.path, "cublasLtDestroy", l.destroy);
  resolve(lib, l.path, "cublasLtMatmul", l.matmul);
  resolve(lib, l.path, "cublasLtMatmulAlgoGetHeuristic", l.algo_get_heuristic);
  resolve(lib, l.path, "cublasLtMatmulAlgoConfigGetAttribute", l.algo_config_get_attribute);
  resolve(lib, l.path, "cublasLtMatmulDescCreate", l.desc_create);
  resolve(lib, l.path, "cublasLtMatmulDescDestroy", l.desc_destroy);
  resolve(lib, l.path, "cublasLtMatmulDescSetAttribute", l.desc_set_attribute);
  resolve(lib, l.path, "cublasLtMatmulPreferenceCreate", l.preference_create);
  resolve(lib, l.path, "cublasLtMatmulPreferenceDestroy", l.preference_destroy);
  resolve(lib, l.path, "cublasLtMatmulPreferenceSetAttribute", l.preference_set_attribute);
  resolve(lib, l.path, "cublasLtMatrixLayoutCreate", l.layout_create);
  resolve(lib, l.path, "cublasLtMatrixLayoutDestroy", l.layout_destroy);
  const size_t version = l.get_version();
  if (version / 10000 != CUBLAS_VER_MAJOR)
    throw std::runtime_error(
        fmt::format("cuBLASLt: {} is version {}, this build needs {}.x", l.path, version, CUBLAS_VER_MAJOR));
  return l;
}

}  // namespace

const CublasLtLibrary& cublaslt() {
  static const CublasLtLibrary library = open_cublaslt();  // a throw leaves it unset: the next call tries again
  return library;
}

std::string cublaslt_status() {
  try {
    const CublasLtLibrary& l = cublaslt();
    return fmt::format("cuBLASLt {} ({})", l.get_version(), l.path);
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace ferry::kernels::cuda
