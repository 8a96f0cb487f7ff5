// DeviceAllocations: process-wide atomic counters.
#include "memory/device_allocations.h"

#include <atomic>

namespace ferry::memory {
namespace {

std::atomic<int64_t> g_count{0};
std::atomic<int64_t> g_bytes{0};

}  // namespace

void DeviceAllocations::record(int64_t bytes) {
  g_count += 1;
  g_bytes += bytes;
}
void DeviceAllocations::release(int64_t bytes) { g_bytes -= bytes; }
int64_t DeviceAllocations::count() { return g_count.load(); }
int64_t DeviceAllocations::bytes_held() { return g_bytes.load(); }

}  // namespace ferry::memory
