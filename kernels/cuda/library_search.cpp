// library_candidates: the dlopen() paths of a run-time-loaded CUDA library, in the order they are tried.
#include "kernels/cuda/library_search.h"

#include <glob.h>
#include <sys/stat.h>

#include <cstdlib>

namespace ferry::kernels::cuda {

std::vector<std::string> library_candidates(const LibrarySearch& search) {
  std::vector<std::string> paths;
  if (const char* env = std::getenv(search.env_var.c_str()); env && *env) {
    struct stat st {};
    const bool dir = stat(env, &st) == 0 && S_ISDIR(st.st_mode);
    paths.push_back(dir ? std::string(env) + "/" + search.soname : std::string(env));
  }
  paths.push_back(search.soname);
  if (!search.toolkit_dir.empty()) paths.push_back(search.toolkit_dir + "/" + search.soname);
  std::vector<std::string> roots = {"/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
                                    "/usr/lib/python3*/dist-packages", "/opt/conda/lib/python3*/site-packages"};
  if (const char* venv = std::getenv("VIRTUAL_ENV")) roots.push_back(std::string(venv) + "/lib/python3*/site-packages");
  if (const char* home = std::getenv("HOME")) roots.push_back(std::string(home) + "/.local/lib/python3*/site-packages");
  for (const std::string& root : roots)
    for (const std::string& dir : search.wheel_dirs) {
      glob_t g{};
      if (glob((root + "/" + dir + "/" + search.soname).c_str(), 0, nullptr, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
      globfree(&g);
    }
  return paths;
}

}  // namespace ferry::kernels::cuda
