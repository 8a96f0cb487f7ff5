// Per-thread workspaces: host buffers whose growth is recorded as a device allocation (the host device's
// ops run on the CPU, so their library workspace is the host device's), or a region bound to the thread.
#include "kernels/cpu/workspace.h"

#include <array>
#include <stdexcept>
#include <string>

#include "memory/device_allocations.h"
#include "memory/host_buffer.h"

namespace ferry::kernels::cpu {
namespace {

struct Bound {
  std::byte* data = nullptr;
  int64_t bytes = 0;
};

struct ThreadWorkspace {
  std::array<memory::HostBuffer, 3> buffers;  // one per Scratch kind
  std::array<Bound, 3> bound;
  ~ThreadWorkspace() {
    for (const auto& b : buffers) memory::DeviceAllocations::release(static_cast<int64_t>(b.bytes()));
  }
};

ThreadWorkspace& thread_workspace() {
  thread_local ThreadWorkspace w;
  return w;
}

const char* user(Scratch kind) { return kind == Scratch::Library ? "oneDNN" : "the op"; }

}  // namespace

float* workspace(Scratch kind, int64_t bytes) {
  ThreadWorkspace& w = thread_workspace();
  const int k = static_cast<int>(kind);
  if (const Bound& bound = w.bound[k]; bound.data) {
    // Planned memory: growing it here would be an allocation the plan did not count.
    if (bytes > bound.bytes)
      throw std::runtime_error(std::string(user(kind)) + " needs " + std::to_string(bytes) + " bytes of scratch; the plan's workspace holds " +
                               std::to_string(bound.bytes) + ": the device must size offload::PlanRequest::workspace_bytes for its largest op");
    return reinterpret_cast<float*>(bound.data);
  }
  memory::HostBuffer& b = w.buffers[k];
  if (static_cast<int64_t>(b.bytes()) < bytes) {
    memory::DeviceAllocations::release(static_cast<int64_t>(b.bytes()));
    b = memory::HostBuffer();  // the old one goes first (its contents need not survive): no moment holding both
    b = memory::HostBuffer(memory::align_up(static_cast<size_t>(bytes), memory::HostBuffer::kAlignment));
    memory::DeviceAllocations::record(static_cast<int64_t>(b.bytes()));
  }
  return b.as<float>().data();
}

int64_t workspace_bytes(Scratch kind) {
  const ThreadWorkspace& w = thread_workspace();
  const int k = static_cast<int>(kind);
  return w.bound[k].data ? w.bound[k].bytes : static_cast<int64_t>(w.buffers[k].bytes());
}

void bind_workspace(Scratch kind, std::byte* data, int64_t bytes) {
  if (data && (reinterpret_cast<uintptr_t>(data) % 64 != 0 || bytes < 0))
    throw std::invalid_argument("bind_workspace: " + std::to_string(bytes) + " bytes at an address that is not 64-byte aligned, or a " +
                                "negative size: the workspace tensor must be planned with 64-byte alignment");
  thread_workspace().bound[static_cast<int>(kind)] = data ? Bound{data, bytes} : Bound{};
}

}  // namespace ferry::kernels::cpu
