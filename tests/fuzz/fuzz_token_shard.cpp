// libFuzzer target: a token shard of any content opens or fails with an error, never a crash.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "dataset/token_shard.h"

namespace {

// This process's shard file, removed when the fuzzer exits.
struct ScratchFile {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("ferry_fuzz_shard_" + std::to_string(::getpid()) + ".bin");
  ~ScratchFile() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ScratchFile scratch;
  const std::filesystem::path& path = scratch.path;
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const ferry::dataset::TokenShard shard(path);
    uint64_t sum = 0;
    for (int32_t t : shard.ids()) sum += static_cast<uint32_t>(t);  // touch every token the header promised
    (void)sum;
  } catch (const std::runtime_error&) {
  }
  return 0;
}
