// Arena: one allocation per arena, counted; cudaMalloc on CUDA builds, a host buffer on the host device.
#include "memory/arena.h"

#include <cstring>
#include <stdexcept>
#include <string>

#ifdef FERRY_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "memory/device_allocations.h"

namespace ferry::memory {

Arena::Arena(Backing backing, int64_t bytes) : backing_(backing), size_(bytes) {
  if (bytes < 0) throw std::invalid_argument("arena: negative size");
  if (backing == Backing::Host) {
    host_ = HostBuffer(static_cast<size_t>(bytes));
    data_ = host_.data();
    std::memset(data_, static_cast<int>(kUnwritten), static_cast<size_t>(bytes));
  } else {
#ifdef FERRY_WITH_CUDA
    void* p = nullptr;
    if (const cudaError_t e = cudaMalloc(&p, static_cast<size_t>(bytes)); e != cudaSuccess) {
      cudaGetLastError();
      throw std::runtime_error("device arena: cudaMalloc of " + format_bytes(bytes) + " failed (" + cudaGetErrorString(e) +
                               "); lower the GPU memory budget");
    }
    data_ = static_cast<std::byte*>(p);
#else
    throw std::runtime_error("device arena: this build has no CUDA support (configure with -DFERRY_CUDA=ON)");
#endif
  }
  DeviceAllocations::record(bytes);
}

Arena::~Arena() { release(); }

void Arena::release() {
  if (!data_ && size_ == 0) return;
#ifdef FERRY_WITH_CUDA
  if (backing_ == Backing::Cuda && data_) cudaFree(data_);
#endif
  host_ = HostBuffer();
  DeviceAllocations::release(size_);
  data_ = nullptr;
  size_ = 0;
}

Arena::Arena(Arena&& o) noexcept : backing_(o.backing_), size_(o.size_), data_(o.data_), host_(std::move(o.host_)) {
  o.data_ = nullptr;
  o.size_ = 0;
}

Arena& Arena::operator=(Arena&& o) noexcept {
  if (this != &o) {
    release();
    backing_ = o.backing_, size_ = o.size_, data_ = o.data_, host_ = std::move(o.host_);
    o.data_ = nullptr, o.size_ = 0;
  }
  return *this;
}

std::byte* Arena::at(int64_t offset, int64_t bytes) const {
  if (offset < 0 || bytes < 0 || offset + bytes > size_)
    throw std::out_of_range("arena: [" + std::to_string(offset) + ", " + std::to_string(offset + bytes) +
                            ") lies outside the " + std::to_string(size_) + "-byte arena");
  return data_ + offset;
}

int64_t Arena::touched_bytes() const {
  if (backing_ != Backing::Host) throw std::logic_error("arena: touched bytes are measured on a host-backed arena only");
  int64_t end = size_;
  while (end > 0 && data_[end - 1] == kUnwritten) --end;  // from the top: the highest tensor is usually written to its end
  return end;
}

}  // namespace ferry::memory
