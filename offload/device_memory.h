// DeviceMemory: what a schedule keeps on the device and where each piece sits in the arena, laid out by
// the Planner once per plan; the Simulator's peak, the trainer's arena size and the Executor's offsets all
// read this one layout.
#pragma once

#include <cstdint>
#include <vector>

#include "memory/planner.h"
#include "offload/problem.h"
#include "offload/schedule.h"

namespace ferry::offload {

// One thing the schedule keeps on the device, with its live interval over the op list.
struct DeviceTensor {
  enum class Kind {
    Activation,      // index: an entry of problem.activations
    Weights,         // index: bucket; a travelling window (from its Prefetch to its Release) or a resident slot
    Grads,           // index: bucket; its gradients during backward, until released
    OptimizerState,  // index: bucket; fp32 master, m and v, in that order (optimizer on the device)
    GradSum,         // index: bucket; fp32 sum over micro-batches (optimizer on the device, grad_accum > 1)
    Workspace,       // index: 0; the libraries' scratch (problem.workspace_bytes > 0), the whole step, listed last
  };
  Kind kind;
  int index;
  memory::TensorLifetime life;  // life.bytes: the tensor's own bytes, without the red zone
};

const char* to_string(DeviceTensor::Kind kind);

struct DeviceMemory {
  std::vector<DeviceTensor> tensors;  // weight windows in the order of their Prefetch
  memory::ArenaLayout layout;         // layout.offsets[i]: where tensors[i] starts; layout.peak: the arena's size
  // Bytes after every tensor that nothing else occupies while the tensor lives: room for canaries that
  // catch a write past a tensor's end. tensors[i]'s red zone is [offset + life.bytes, + red_zone_bytes).
  int64_t red_zone_bytes = 0;
};

// Everything the schedule keeps on the device. Weight windows appear in the order of their Prefetch; the
// workspace, when there is one, comes last.
std::vector<DeviceTensor> device_tensors(const OffloadProblem& problem, const Schedule& schedule);
std::vector<memory::TensorLifetime> lifetimes(const std::vector<DeviceTensor>& tensors);

// The schedule's device tensors and one Planner layout of them, each padded by red_zone_bytes (>= 0).
DeviceMemory lay_out(const OffloadProblem& problem, const Schedule& schedule, int64_t red_zone_bytes = 0);

}  // namespace ferry::offload
