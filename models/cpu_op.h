// run_cpu_op: one op of a ModelSpec on the CPU, wherever its operands live and whatever their storage. The
// CpuRunner points the operands into its own arena and parameters (the ParameterStore, or its working copy
// in the precision); the host device into its arena.
#pragma once

#include <cstddef>
#include <span>

#include "kernels/op_kernels.h"
#include "models/model_spec.h"

namespace ferry::models {

using kernels::Operand;

// Where one op's operands are, by position: its input and output tensors (as op.inputs / op.outputs list
// them) and its parameters' values and gradients (as op.params lists them).
struct OpOperands {
  std::span<const Operand> inputs, outputs, values, grads;
};

// Runs `op` (through dispatch_op, models/op_dispatch.h, on the CPU's fp32 kernels): forward ops overwrite
// their outputs, backward ops accumulate into theirs and into their parameters' gradients (gradient tensors
// the op creates are zeroed first). loss_weight scales the loss's gradient (1 / micro-batches, times fp16's
// loss scale). Operands stored in bf16/fp16 are widened to fp32 in this thread's Storage workspace around
// the op and its results rounded back to nearest even, so the math is the fp32 math of kernels/cpu; fp32
// operands are used in place. Throws std::invalid_argument, naming the op, for operands whose dtypes do not
// fit its slots. Returns the batch's mean loss for the loss's forward op, else 0.
float run_cpu_op(const ModelSpec& spec, const OpSpec& op, const OpOperands& at, float loss_weight);

}  // namespace ferry::models
