// run_cpu_op: one op of a ModelSpec on the CPU, wherever its operands live. The CpuRunner points the
// operands into its own arena and ParameterStore; the Executor points them into the device arena.
#pragma once

#include <cstddef>
#include <span>

#include "models/model_spec.h"

namespace ferry::models {

// Where one op's operands are, by position: its input and output tensors (as op.inputs / op.outputs list
// them) and its parameters' values and gradients (as op.params lists them; gradients may be null in forward).
struct OpOperands {
  std::span<std::byte* const> inputs, outputs;
  std::span<float* const> values, grads;
};

// Runs `op`: forward ops overwrite their outputs, backward ops accumulate into theirs and into their
// parameters' gradients (gradient tensors the op creates are zeroed first). loss_weight scales the loss's
// gradient (1 / micro-batches). Returns the batch's mean loss for the loss's forward op, else 0.
float run_cpu_op(const ModelSpec& spec, const OpSpec& op, const OpOperands& at, float loss_weight);

}  // namespace ferry::models
