// Per-thread workspaces in host buffers; growth is recorded as a device allocation (the host device's
// ops run on the CPU, so their library workspace is the host device's).
#include "models/ops/workspace.h"

#include <array>

#include "memory/device_allocations.h"
#include "memory/host_buffer.h"

namespace ferry::models::ops {
namespace {

struct ThreadWorkspace {
  std::array<memory::HostBuffer, 3> buffers;  // one per Scratch kind
  ~ThreadWorkspace() {
    for (const auto& b : buffers) memory::DeviceAllocations::release(static_cast<int64_t>(b.bytes()));
  }
};

memory::HostBuffer& buffer(Scratch kind) {
  thread_local ThreadWorkspace w;
  return w.buffers[static_cast<int>(kind)];
}

}  // namespace

float* workspace(Scratch kind, int64_t bytes) {
  memory::HostBuffer& b = buffer(kind);
  if (static_cast<int64_t>(b.bytes()) < bytes) {
    memory::DeviceAllocations::release(static_cast<int64_t>(b.bytes()));
    b = memory::HostBuffer(memory::align_up(static_cast<size_t>(bytes), memory::HostBuffer::kAlignment));
    memory::DeviceAllocations::record(static_cast<int64_t>(b.bytes()));
  }
  return b.as<float>().data();
}

int64_t workspace_bytes(Scratch kind) { return static_cast<int64_t>(buffer(kind).bytes()); }

}  // namespace ferry::models::ops
