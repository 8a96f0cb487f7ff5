// Arena: the one device allocation, made at start-up; every tensor that lives on the device sits at an
// offset the Planner chose. After start-up nothing else is allocated on the device, which the process-wide
// count of device allocations (device_allocations.h) lets tests assert.
#pragma once

#include <cstddef>
#include <cstdint>

#include "memory/host_buffer.h"

namespace ferry::memory {

class Arena {
 public:
  enum class Backing { Host, Cuda };  // the host device's capped buffer, or cudaMalloc
  // A host-backed arena starts filled with this byte: bytes that still hold it were never written, which
  // gives the host device its measured peak (touched_bytes); red zones between tensors keep it too.
  static constexpr std::byte kUnwritten{0xA5};

  Arena(Backing backing, int64_t bytes);
  ~Arena();
  Arena(Arena&& other) noexcept;
  Arena& operator=(Arena&& other) noexcept;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  Backing backing() const { return backing_; }
  int64_t size() const { return size_; }
  std::byte* data() const { return data_; }
  // The tensor at `offset`, checked to lie inside the arena (a planning bug is an error, not corruption).
  std::byte* at(int64_t offset, int64_t bytes) const;

  // Host backing: one past the highest byte ever written (bytes from there to the end still hold
  // kUnwritten): the device memory the run really touched, measured rather than planned.
  int64_t touched_bytes() const;

 private:
  void release();
  Backing backing_;
  int64_t size_ = 0;
  std::byte* data_ = nullptr;
  HostBuffer host_;  // Backing::Host
};

}  // namespace ferry::memory
