// The fuzz targets without libFuzzer: each file named (or each file in a folder named) goes through the target's
// LLVMFuzzerTestOneInput once. ctest replays the committed corpus this way in the ordinary build, so an input
// that once crashed a reader stays a test; tests/fuzz/run_fuzz.sh is the fuzzing itself (clang, sanitizers).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void replay(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + file.string());
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_FOLDER...: each file once through the fuzz target\n", argv[0]);
    return 2;
  }
  int inputs = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path path = argv[i];
    if (std::filesystem::is_directory(path)) {
      for (const auto& entry : std::filesystem::directory_iterator(path))
        if (entry.is_regular_file()) replay(entry.path()), ++inputs;
    } else {
      replay(path), ++inputs;
    }
  }
  if (inputs == 0) {
    std::fprintf(stderr, "%s: no input files in the paths given\n", argv[0]);
    return 1;
  }
  std::printf("%d inputs replayed\n", inputs);
  return 0;
}
