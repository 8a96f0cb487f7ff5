// CRC32C: the SSE4.2 crc32 instruction where the CPU has it (chosen at run time, so the binary runs on
// any x86-64), else a byte-wise table; both give the same value.
#include "foundation/crc32c.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace ferry {
namespace {

constexpr uint32_t kReflectedPolynomial = 0x82F63B78u;

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kReflectedPolynomial : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

uint32_t crc32c_table(uint32_t state, const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) state = kTable[(state ^ p[i]) & 0xFF] ^ (state >> 8);
  return state;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(uint32_t state, const unsigned char* p, size_t n) {
  uint64_t wide = state;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // unaligned input
    wide = _mm_crc32_u64(wide, word);
  }
  auto narrow = static_cast<uint32_t>(wide);
  for (; n > 0; --n, ++p) narrow = _mm_crc32_u8(narrow, *p);
  return narrow;
}
const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");
#endif

}  // namespace

uint32_t crc32c(uint32_t crc, std::span<const std::byte> data) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  const uint32_t state = ~crc;
#if defined(__x86_64__)
  if (kHaveSse42) return ~crc32c_sse42(state, p, data.size());
#endif
  return ~crc32c_table(state, p, data.size());
}

FileChecksum checksum_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot read '" + path.string() + "': " + std::strerror(errno));
  std::vector<std::byte> chunk(size_t(1) << 20);
  FileChecksum sum;
  for (;;) {
    const ssize_t got = ::read(fd, chunk.data(), chunk.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      ::close(fd);
      throw std::runtime_error("cannot read '" + path.string() + "': " + std::strerror(err));
    }
    if (got == 0) break;
    sum.crc32c = crc32c(sum.crc32c, std::span(chunk.data(), static_cast<size_t>(got)));
    sum.bytes += static_cast<uint64_t>(got);
  }
  ::close(fd);
  return sum;
}

}  // namespace ferry
