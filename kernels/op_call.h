// OpCall: one op decoded for a backend, with no model in sight: its operands whole (each tensor and
// parameter the op lists, with its element count and whether the op reads and writes it) and a launch that
// builds the op's argument struct from them. A device runs one on its compute stream with its own kernels
// (the CPU widens 2-byte operands to fp32 around it: kernels/cpu/cpu_kernels.h); engine/ops decodes them
// from a model's op list.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kernels/op_kernels.h"

namespace ferry::kernels {

struct CallOperand {
  Operand at;
  int64_t elements = 0;  // the whole tensor's (launch makes the views into it: GPT-2's q, k, v inside qkv)
  bool read = false;     // the op reads what it holds: inputs, parameter values, what backward accumulates into
  bool written = false;  // the op writes it: outputs, and parameter gradients in backward
  bool zeroed = false;   // a gradient tensor the op creates: set to zero before the op accumulates into it
};

struct OpCall {
  std::string name;            // the op's, for errors
  DType compute = DType::F32;  // the one floating dtype of its operands (checked when it was decoded)
  std::vector<CallOperand> operands;
  // Builds the op's argument struct from `operands` (the call's own, or copies of them in other storage: as
  // many, in the same order) and calls `kernels`. Returns the batch's mean loss for the loss's forward, else 0.
  std::function<float(OpKernels& kernels, std::span<const Operand> operands)> launch;
};

// Runs `call` on `kernels` with `operands` in place of its own (as many, in the same order) stored as
// `compute`: refuses a dtype the kernels do not compute in (std::invalid_argument naming the op), zeroes the
// gradient tensors the op creates, then launches. Returns what launch returns.
float run_call(const OpCall& call, std::span<const Operand> operands, DType compute, OpKernels& kernels);
// The same on the call's own operands.
float run_call(const OpCall& call, OpKernels& kernels);

}  // namespace ferry::kernels
