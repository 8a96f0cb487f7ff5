// Where a CUDA library Ferry opens at run time (dlopen) may be: a user's override, the loader's own search path,
// the toolkit Ferry was built with, and PyTorch's NVIDIA wheels in the usual site-packages folders.
#pragma once

#include <string>
#include <vector>

namespace ferry::kernels::cuda {

struct LibrarySearch {
  std::string env_var;                  // names the file or its folder, tried first (e.g. FERRY_CUDNN_LIB)
  std::string soname;                   // e.g. libcudnn.so.9: the loader's search path is tried with it
  std::string toolkit_dir;              // a folder tried after the loader's path; empty: none
  std::vector<std::string> wheel_dirs;  // relative to site-packages, e.g. nvidia/cudnn/lib
};

// The paths to try with dlopen, in order (plain sonames are looked up by the loader).
std::vector<std::string> library_candidates(const LibrarySearch& search);

}  // namespace ferry::kernels::cuda
