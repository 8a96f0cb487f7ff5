// What the fuzz targets that read a folder of files share: a scratch folder of their own, and the input's
// framing into files: a flags byte, then one record per file (u32 little-endian length, bytes), in order.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>

namespace ferry::fuzz {

// This process's scratch folder, removed when the fuzzer exits (run_fuzz.sh's TMPDIR, whatever way it ends).
struct ScratchDir {
  explicit ScratchDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {}
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::filesystem::path path;
};

// Writes the records of `data` (after its flags byte) as the files `names`, relative to `root`, in order: a
// record cut short by the input's end keeps what there is; files past the last record are not written.
// Returns the flags byte (0 for an empty input).
inline uint8_t write_records(const uint8_t* data, size_t size, const std::filesystem::path& root,
                             std::span<const char* const> names) {
  const uint8_t flags = size > 0 ? data[0] : 0;
  size_t at = size > 0 ? 1 : 0;
  for (const char* name : names) {
    if (size - at < 4) break;
    uint32_t length = 0;
    std::memcpy(&length, data + at, 4);
    at += 4;
    length = static_cast<uint32_t>(std::min<size_t>(length, size - at));
    std::ofstream(root / name, std::ios::binary).write(reinterpret_cast<const char*>(data + at), length);
    at += length;
  }
  return flags;
}

}  // namespace ferry::fuzz
