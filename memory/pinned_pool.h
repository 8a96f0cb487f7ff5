// PinnedHostPool: the host memory that crosses PCIe, pinned once at start-up (cudaHostAlloc on CUDA
// builds with a GPU; page-aligned and optionally mlock-ed on the host device) and carved into regions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "memory/host_buffer.h"

namespace ferry::memory {

class PinnedHostPool {
 public:
  struct Options {
    bool cuda = false;  // cudaHostAlloc (needs a CUDA build and a GPU); otherwise page-aligned host memory
    bool lock = false;  // mlock the host memory so it is never paged out (may fail: see lock_error)
  };

  PinnedHostPool(int64_t bytes, Options options);
  ~PinnedHostPool();
  PinnedHostPool(const PinnedHostPool&) = delete;
  PinnedHostPool& operator=(const PinnedHostPool&) = delete;

  int64_t size() const { return size_; }
  int64_t used() const { return used_; }
  std::byte* data() const { return data_; }
  bool cuda_pinned() const { return cuda_; }
  bool locked() const { return locked_; }
  const std::string& lock_error() const { return lock_error_; }  // why mlock failed, when it did

  // The next `bytes` of the pool, aligned; an exhausted pool is an error naming both sizes.
  std::byte* carve(int64_t bytes, int64_t alignment = 256);

 private:
  int64_t size_ = 0, used_ = 0;
  std::byte* data_ = nullptr;
  bool cuda_ = false, locked_ = false;
  std::string lock_error_;
  HostBuffer host_;
};

}  // namespace ferry::memory
