// cuBLASLt opened at its first use (dlopen), not linked: linking maps its 540 MB file into every process, about
// 200 MB of resident memory and a quarter of a second at start, which CPU runs, `ferry plan` and every test paid
// for nothing. The entry points Ferry calls, each typed by its declaration in cublasLt.h.
#pragma once

#include <cublasLt.h>

#include <string>

namespace ferry::kernels::cuda {

struct CublasLtLibrary {
  std::string path;  // the file dlopen() opened
  decltype(&::cublasLtGetVersion) get_version = nullptr;
  decltype(&::cublasLtGetStatusString) status_string = nullptr;
  decltype(&::cublasLtCreate) create = nullptr;
  decltype(&::cublasLtDestroy) destroy = nullptr;
  decltype(&::cublasLtMatmul) matmul = nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic = nullptr;
  decltype(&::cublasLtMatmulAlgoConfigGetAttribute) algo_config_get_attribute = nullptr;
  decltype(&::cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&::cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) desc_set_attribute = nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) preference_create = nullptr;
  decltype(&::cublasLtMatmulPreferenceDestroy) preference_destroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) preference_set_attribute = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&::cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
};

// The library, opened the first time this is called (libcublasLt.so.<the toolkit's major>: $FERRY_CUBLASLT_LIB,
// the loader's path, the build's toolkit, PyTorch's wheels). Throws std::runtime_error naming what was tried.
const CublasLtLibrary& cublaslt();

// "cuBLASLt <version> (<path>)", or why it does not load; opens it.
std::string cublaslt_status();

}  // namespace ferry::kernels::cuda
