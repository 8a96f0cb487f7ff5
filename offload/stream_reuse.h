// The check that the Planner's reuse of device memory is safe across streams: a tensor placed where an
// earlier one lay may be written only once every stream has finished with the earlier one (a prefetch must
// not overwrite gradients the d2h stream is still copying out). Read by the Simulator after its replay.
#pragma once

#include <string>
#include <vector>

#include "offload/device_memory.h"

namespace ferry::offload {

// When, in one replayed step, the streams touched the device tensors.
struct StreamTimes {
  std::vector<double> op_start, op_end;  // per op, on the compute stream
  std::vector<double> window_copy_start; // per travelling weight window, in the order of its Prefetch
  std::vector<double> grads_landed;      // per bucket: its gradients' d2h copy ended (0: never offloaded)
};

// Empty when every tensor that reuses another's bytes (red zones included) is first written after the last
// access to the earlier one has ended, on whichever stream; else the two tensors, the bytes and the times.
std::string check_stream_reuse(const DeviceMemory& memory, const StreamTimes& times);

}  // namespace ferry::offload
