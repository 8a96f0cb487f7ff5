// DeviceAllocations: the count of every allocation of device memory in this process (arenas and library
// workspaces alike go through record/release), so that tests can assert nothing is allocated on a
// device after start-up.
#pragma once

#include <cstdint>

namespace ferry::memory {

struct DeviceAllocations {
  static void record(int64_t bytes);   // an allocation was made
  static void release(int64_t bytes);  // memory was given back (not an allocation)
  static int64_t count();              // allocations so far
  static int64_t bytes_held();         // bytes allocated and not yet released
};

}  // namespace ferry::memory
