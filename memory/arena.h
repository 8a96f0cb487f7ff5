// Arena: the one device allocation, made at start-up; every tensor that lives on the device sits at an
// offset the Planner chose. After start-up nothing else is allocated on the device, which the process-wide
// allocation count lets tests assert.
#pragma once

#include <cstddef>
#include <cstdint>

#include "memory/host_buffer.h"

namespace ferry::memory {

class Arena {
 public:
  enum class Backing { Host, Cuda };  // the host device's capped buffer, or cudaMalloc

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

  // Device allocations made by arenas in this process so far, and the bytes they hold now.
  static int64_t allocation_count();
  static int64_t bytes_held();

 private:
  void release();
  Backing backing_;
  int64_t size_ = 0;
  std::byte* data_ = nullptr;
  HostBuffer host_;  // Backing::Host
};

}  // namespace ferry::memory
