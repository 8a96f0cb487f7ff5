// HostBuffer: an owned, zero-initialised, page-aligned block of host memory (RAII, move-only).
// Every large host-side array in Ferry (parameters, grads, optimizer state, activations) lives in one.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

namespace ferry::memory {

class HostBuffer {
 public:
  static constexpr std::size_t kAlignment = 4096;

  HostBuffer() = default;
  explicit HostBuffer(std::size_t bytes);

  std::size_t bytes() const { return bytes_; }
  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }

  template <class T> std::span<T> as() { return {reinterpret_cast<T*>(data()), bytes_ / sizeof(T)}; }
  template <class T> std::span<const T> as() const {
    return {reinterpret_cast<const T*>(data()), bytes_ / sizeof(T)};
  }

 private:
  struct Free { void operator()(std::byte* p) const; };
  std::unique_ptr<std::byte, Free> data_;
  std::size_t bytes_ = 0;
};

// Rounds `bytes` up to a multiple of `alignment` (a power of two).
constexpr std::size_t align_up(std::size_t bytes, std::size_t alignment) {
  return (bytes + alignment - 1) & ~(alignment - 1);
}

// "12.3 MiB" below a GiB, "1.23 GiB" above: for messages about memory.
std::string format_bytes(int64_t bytes);

}  // namespace ferry::memory
