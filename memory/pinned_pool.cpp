// PinnedHostPool: one pinned allocation, bump-allocated into regions at start-up.
#include "memory/pinned_pool.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#ifdef FERRY_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace ferry::memory {

PinnedHostPool::PinnedHostPool(int64_t bytes, Options options) : size_(bytes) {
  if (bytes < 0) throw std::invalid_argument("pinned pool: negative size");
  if (options.cuda) {
#ifdef FERRY_WITH_CUDA
    void* p = nullptr;
    if (const cudaError_t e = cudaHostAlloc(&p, static_cast<size_t>(bytes), cudaHostAllocDefault); e != cudaSuccess) {
      cudaGetLastError();
      throw std::runtime_error(std::string("pinned pool: cudaHostAlloc of ") + std::to_string(bytes >> 20) +
                               " MiB failed (" + cudaGetErrorString(e) + ")");
    }
    std::memset(p, 0, static_cast<size_t>(bytes));
    data_ = static_cast<std::byte*>(p);
    cuda_ = true;
#else
    throw std::runtime_error("pinned pool: this build has no CUDA support (configure with -DFERRY_CUDA=ON)");
#endif
  } else {
    host_ = HostBuffer(static_cast<size_t>(bytes));
    data_ = host_.data();
    if (options.lock && bytes > 0) {
      if (mlock(data_, static_cast<size_t>(bytes)) == 0) {
        locked_ = true;
      } else {
        lock_error_ = std::string("mlock failed: ") + std::strerror(errno) + " (raise ulimit -l to lock it)";
      }
    }
  }
}

PinnedHostPool::~PinnedHostPool() {
  if (locked_) munlock(data_, static_cast<size_t>(size_));
#ifdef FERRY_WITH_CUDA
  if (cuda_) cudaFreeHost(data_);
#endif
}

std::byte* PinnedHostPool::carve(int64_t bytes, int64_t alignment) {
  const int64_t start = (used_ + alignment - 1) & ~(alignment - 1);
  if (bytes < 0 || start + bytes > size_)
    throw std::runtime_error("pinned pool: " + std::to_string(bytes) + " more bytes do not fit (" +
                             std::to_string(used_) + " of " + std::to_string(size_) + " used)");
  used_ = start + bytes;
  return data_ + start;
}

}  // namespace ferry::memory
