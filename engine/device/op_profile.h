// Start-up profiling on the device itself: every op of a step timed with the device's own timed events,
// its operands laid out one op at a time in a small arena (the largest op's), so that profiling holds
// neither a whole step of activations nor a copy of the model.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/device/device.h"
#include "models/model_spec.h"

namespace ferry::device {

// The arena a device needs to profile `spec`: the largest op's operands (tensors, parameter values and
// gradients, in their storage), each 256-byte aligned, then `workspace_bytes` for the device's workspace
// (Device::op_workspace_bytes(spec): the CUDA device's; the host device's is 0, its scratch is measured).
int64_t profile_arena_bytes(const models::ModelSpec& spec, int64_t workspace_bytes = 0);

// The median of one op's timed passes (the middle two's mean for an even count): the prediction is set
// beside the median measured step, and the fastest pass, which ran while no other thread took its cores,
// undershoots that median (ferry-bench offload, README).
double median_seconds(std::vector<double> pass_seconds);

// How many timed passes profile_ops runs: at least `min` and `min_seconds` of timed ops, then until the step's
// op time settles (its estimate from the odd passes and from the even passes agree within `tolerance`, after
// two passes in a row), and never past `max_seconds` of timed ops (one pass at least) or `max` passes. On a
// shared machine a two-thread op's time swings with the load from one pass to the next; a median of few passes
// swings with it.
struct ProfilePasses {
  int min = 6;
  double min_seconds = 1.0;
  double tolerance = 0.03;
  double max_seconds = 3.0;
  int max = 200;
};

// Each op's time from repeated calls of `time_pass` (one pass: the seconds of each of weights.size() ops, every
// op timed once), the median of its passes, repeated as `passes` says; weights[k]: how many ops of the step op k
// stands for (the settling test weighs the step's time). `ran` receives the number of passes.
std::vector<double> settled_op_seconds(std::span<const int> weights, const ProfilePasses& passes,
                                       const std::function<std::vector<double>()>& time_pass, int* ran = nullptr);

// For each op of spec.ops, the first op whose time stands for its own: the same kind, pass, attributes and
// operand shapes and dtypes (every block repeats the first block's ops). profile_ops times those alone.
std::vector<int> ops_profiled_in_place_of(const models::ModelSpec& spec);

// Each op's time on `device` (whose arena holds profile_arena_bytes(spec, device.op_workspace_bytes(spec));
// the workspace after the operands is bound while the ops run, and unbound after), indexed like spec.ops: the
// median of the timed passes over every op that `passes` asks for (settled_op_seconds). The token ids and
// targets (a batch of the run: B*T each) make the embedding and the loss read real ids; every other operand
// holds small values. The first pass warms up (kernels compiled, workspaces sized, pages touched). An op timed
// in another's place (ops_profiled_in_place_of) gets that op's time.
std::vector<double> profile_ops(const models::ModelSpec& spec, Device& device, std::span<const int32_t> tokens,
                                std::span<const int32_t> targets, const ProfilePasses& passes = {});

}  // namespace ferry::device
