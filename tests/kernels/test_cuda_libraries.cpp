// The CUDA libraries Ferry opens at run time: where it looks (library_candidates), and cuBLASLt absent from the
// process until its first use, then every entry point resolved (no GPU needed to open it; built only with CUDA).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cublaslt_library.h"
#include "kernels/cuda/library_search.h"

namespace ferry::kernels::cuda {
namespace {

bool mapped_into_this_process(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  const std::string all((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
  return all.find(name) != std::string::npos;
}

// Each test runs in its own process (gtest_discover_tests), so nothing before this test opened cuBLASLt.
TEST(CublasLtLibrary, OpenedAtFirstUseWithEveryEntryPoint) {
  EXPECT_FALSE(mapped_into_this_process("libcublasLt")) << "cuBLASLt is linked: every process pays for it";
  const CublasLtLibrary* lt = nullptr;
  try {
    lt = &cublaslt();
  } catch (const std::runtime_error& e) {
    GTEST_SKIP() << "no cuBLASLt on this machine: " << e.what();
  }
  EXPECT_TRUE(mapped_into_this_process("libcublasLt"));
  EXPECT_EQ(lt->get_version() / 10000, static_cast<size_t>(CUBLAS_VER_MAJOR));
  EXPECT_NE(std::string(lt->status_string(CUBLAS_STATUS_NOT_SUPPORTED)).find("not supported"), std::string::npos);
  for (const void* entry : {(void*)lt->create, (void*)lt->destroy, (void*)lt->matmul, (void*)lt->algo_get_heuristic,
                            (void*)lt->algo_config_get_attribute, (void*)lt->desc_create, (void*)lt->desc_destroy,
                            (void*)lt->desc_set_attribute, (void*)lt->preference_create, (void*)lt->preference_destroy,
                            (void*)lt->preference_set_attribute, (void*)lt->layout_create, (void*)lt->layout_destroy})
    EXPECT_NE(entry, nullptr);
  EXPECT_NE(cublaslt_status().find(lt->path), std::string::npos);
}

// The user's file or folder first, then the loader's path, the toolkit, and the wheels of every site-packages
// folder (here one under $HOME/.local).
TEST(LibrarySearch, TheUsersChoiceFirstThenTheLoaderThenToolkitThenWheels) {
  const std::filesystem::path home = std::filesystem::path(::testing::TempDir()) / "library_search_home";
  const std::filesystem::path wheel = home / ".local/lib/python3.12/site-packages/nvidia/foo/lib";
  std::filesystem::create_directories(wheel);
  std::ofstream(wheel / "libfoo.so.7") << "";
  setenv("HOME", home.c_str(), 1);
  unsetenv("VIRTUAL_ENV");
  setenv("FERRY_TEST_FOO_LIB", home.c_str(), 1);  // a folder: its libfoo.so.7
  const LibrarySearch search{
      "FERRY_TEST_FOO_LIB", "libfoo.so.7", "/opt/toolkit/lib", {"nvidia/foo/lib", "nvidia/bar/lib"}};
  std::vector<std::string> got = library_candidates(search);
  const std::vector<std::string> want{(home / "libfoo.so.7").string(), "libfoo.so.7", "/opt/toolkit/lib/libfoo.so.7",
                                      (wheel / "libfoo.so.7").string()};
  EXPECT_EQ(got, want);
  setenv("FERRY_TEST_FOO_LIB", "/somewhere/libfoo-custom.so", 1);  // a file: as given
  EXPECT_EQ(library_candidates(search).front(), "/somewhere/libfoo-custom.so");
  unsetenv("FERRY_TEST_FOO_LIB");
  EXPECT_EQ(library_candidates(search).front(), "libfoo.so.7");
  std::filesystem::remove_all(home);
}

}  // namespace
}  // namespace ferry::kernels::cuda
