// Start-up profiling on the device itself: every op of a step timed with the device's own timed events,
// its operands laid out one op at a time in a small arena (the largest op's), so that profiling holds
// neither a whole step of activations nor a copy of the model.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/device/device.h"
#include "models/model_spec.h"

namespace ferry::ops {

// The arena a device needs to profile `spec`: the largest op's operands (tensors, parameter values and
// gradients, in their storage), each 256-byte aligned, then `workspace_bytes` for the device's workspace
// (op_workspace_bytes(kind, spec): the CUDA device's; the host device's is 0, its scratch is measured).
int64_t profile_arena_bytes(const models::ModelSpec& spec, int64_t workspace_bytes = 0);

// The median of one op's timed passes (the middle two's mean for an even count): the prediction is set
// beside the median measured step, and the fastest pass, which ran while no other thread took its cores,
// undershoots that median (ferry-bench offload, README).
double median_seconds(std::vector<double> pass_seconds);

// For each op of spec.ops, the first op whose time stands for its own: the same kind, pass, attributes and
// operand shapes and dtypes (every block repeats the first block's ops). profile_ops times those alone.
std::vector<int> ops_profiled_in_place_of(const models::ModelSpec& spec);

// Each op's time on `device`, indexed like spec.ops (its arena holds profile_arena_bytes(spec,
// op_workspace_bytes(device.kind(), spec)); the workspace after the operands is bound while the ops run, and
// unbound after): the median of at least min_reps passes over every op and min_seconds in all, at most max_reps. The
// token ids and targets (a batch of the run: B*T each) make the embedding and the loss read real ids; every other
// operand holds small values. The first pass warms up (kernels compiled, workspaces sized). An op timed in another's
// place (ops_profiled_in_place_of) gets that op's time.
std::vector<double> profile_ops(const models::ModelSpec& spec, device::Device& device, std::span<const int32_t> tokens,
                                std::span<const int32_t> targets, int min_reps, double min_seconds, int max_reps);

}  // namespace ferry::ops
