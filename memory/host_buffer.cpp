// HostBuffer: aligned allocation with a clear error when the host is out of memory.
#include "memory/host_buffer.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace ferry::memory {

HostBuffer::HostBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  void* p = std::aligned_alloc(kAlignment, align_up(bytes, kAlignment));
  if (!p) {
    throw std::runtime_error("host memory: could not allocate " + std::to_string(bytes >> 20) +
                             " MiB; reduce the model or batch size");
  }
  std::memset(p, 0, bytes);
  data_.reset(static_cast<std::byte*>(p));
}

std::string format_bytes(int64_t bytes) {
  char buf[32];
  if (bytes < (int64_t(1) << 30))
    std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / double(1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / double(int64_t(1) << 30));
  return buf;
}

void HostBuffer::Free::operator()(std::byte* p) const { std::free(p); }

}  // namespace ferry::memory
