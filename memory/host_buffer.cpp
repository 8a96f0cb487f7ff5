// HostBuffer: aligned allocation with a clear error when the host is out of memory.
#include "memory/host_buffer.h"

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

void HostBuffer::Free::operator()(std::byte* p) const { std::free(p); }

}  // namespace ferry::memory
