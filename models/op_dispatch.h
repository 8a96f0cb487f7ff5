// The op dispatcher every device shares: it decodes an op's operands by slot into one argument struct per
// kind and pass and hands it to a backend (OpKernels: the CPU's fp32 math, the CUDA kernels), so the slot
// conventions (models/backward.cpp's rule, documented in op_dispatch.cpp) are read in exactly one place.
#pragma once

#include <cstdint>

#include "kernels/op_kernels.h"
#include "models/cpu_op.h"
#include "models/model_spec.h"

namespace ferry::models {

using kernels::OpKernels;

// The op's one floating dtype, after checking every operand: as many as the op's slots, ids int32,
// fixed-dtype tensors in their dtype, every other present operand in one of F32/BF16/F16 (the same for all).
// Throws std::invalid_argument naming the op otherwise.
DType op_compute_dtype(const ModelSpec& spec, const OpSpec& op, const OpOperands& at);

// Checks the operands (op_compute_dtype, and that `kernels` computes in that dtype), zeroes the gradient
// tensors the op creates, and runs the op on `kernels`. loss_weight scales the loss's gradient. Returns the
// mean loss for the loss's forward op, else 0.
float dispatch_op(const ModelSpec& spec, const OpSpec& op, const OpOperands& at, float loss_weight, OpKernels& kernels);

}  // namespace ferry::models
