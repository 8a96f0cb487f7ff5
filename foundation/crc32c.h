// CRC32C (Castagnoli), the checksum checkpoints record per file: the polynomial of iSCSI, ext4 and
// gRPC, with an x86 instruction (SSE4.2) that makes it cheap beside the disk, and a table elsewhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

namespace ferry {

// The CRC32C of `data`, continuing from `crc` (0 for a fresh checksum): crc32c(crc32c(0, a), b) is the
// checksum of a followed by b.
uint32_t crc32c(uint32_t crc, std::span<const std::byte> data);

struct FileChecksum {
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

// The size and CRC32C of a whole file, read in chunks; an unreadable file is an error naming it.
FileChecksum checksum_file(const std::filesystem::path& path);

}  // namespace ferry
