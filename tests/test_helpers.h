// Shared helpers for the tests: paths to committed data, private scratch paths, and tolerance checks with
// useful messages.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "memory/dtype.h"

namespace ferry {

// How GoogleTest prints a DType, a test's parameter or a value in a failure: "bf16", not "4-byte object
// <01-00 00-00>" (found by argument-dependent lookup).
inline void PrintTo(DType t, std::ostream* os) { *os << to_string(t); }

}  // namespace ferry

namespace ferry::testing {

inline std::filesystem::path data_path(const std::string& name) { return std::filesystem::path(FERRY_TEST_DATA) / name; }
inline std::filesystem::path source_path(const std::string& name) { return std::filesystem::path(FERRY_SOURCE_DIR) / name; }
// A path in the temporary folder that no other test process uses (ctest runs tests in parallel, and
// several checkouts may run the suite at once on one machine).
inline std::filesystem::path scratch_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("ferry-test-" + std::to_string(::getpid()) + "-" + name);
}

// A file's bytes as a string ("" when it cannot be read).
inline std::string file_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The message of the runtime_error `f` throws; "" when it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// Largest |a-b| / max(|b|, floor) over two arrays; `floor` keeps near-zero references from dominating.
inline double max_rel_error(std::span<const float> a, std::span<const float> b, double floor) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(double(a[i]) - b[i]) / std::max(std::abs(double(b[i])), floor));
  return worst;
}

// Largest |a-b| relative to b's largest magnitude: for storage that rounds every value relative to its own
// size (bf16), where tiny entries carry the rounding of the big ones they are computed from.
inline double max_error_of_largest(std::span<const float> a, std::span<const float> b) {
  double scale = 0;
  for (float x : b) scale = std::max(scale, std::abs(double(x)));
  return max_rel_error(a, b, scale);
}

// Every element of `got` has the bytes of `want`'s (floats compared as bits: -0 and NaN payloads count).
template <class V>
void expect_bitwise(const std::vector<V>& got, const std::vector<V>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(V)), 0) << what << " at " << i;
}

}  // namespace ferry::testing
