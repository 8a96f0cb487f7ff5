// The op dispatcher every device shares: it decodes a model's op and its operands by slot into a
// kernels::OpCall (the argument struct of the op's kind and pass, the operands' sizes and uses), so the slot
// conventions (models/backward.cpp's rule, documented in op_dispatch.cpp) are read in exactly one place and
// the devices and kernels below it know no model.
#pragma once

#include <span>

#include "kernels/op_call.h"
#include "models/model_spec.h"

namespace ferry::ops {

// Where one op's operands are, by position: its input and output tensors (as op.inputs / op.outputs list
// them) and its parameters' values and gradients (as op.params lists them). Null data: absent (a
// parameter's gradient in forward, a frozen parameter's in backward).
struct OpOperands {
  std::span<const kernels::Operand> inputs, outputs, values, grads;
};

// The op's one floating dtype, after checking every operand: as many as the op's slots, ids int32,
// fixed-dtype tensors in their dtype, every other present operand in one of F32/BF16/F16 (the same for all).
// Throws std::invalid_argument naming the op otherwise.
DType op_compute_dtype(const models::ModelSpec& spec, const models::OpSpec& op, const OpOperands& at);

// `op` on `at` as a kernel call (checked by op_compute_dtype): forward overwrites its outputs; backward adds
// into its parameters' gradients, and writes its outputs when it is the first to produce every one of them,
// else accumulates into them (those it creates zeroed first). loss_weight scales the loss's gradient (1 /
// micro-batches, times fp16's loss scale). The call refers to `op`, which must outlive it.
kernels::OpCall decode_op(const models::ModelSpec& spec, const models::OpSpec& op, const OpOperands& at,
                          float loss_weight);

// The attention kernels' sizes for an Attention op's attributes: GPT-2's packed qkv (`packed`: rows of 3 x in),
// else q, k and v of their own, k and v of attrs.kv_heads heads (0: as many as the queries'). The dispatch and the
// CUDA workspace's sizing read the same sizes.
kernels::AttentionDims attention_dims(const models::OpAttrs& attrs, bool packed);

// decode_op run on `kernels` (kernels::run_call). Returns the mean loss for the loss's forward op, else 0.
float dispatch_op(const models::ModelSpec& spec, const models::OpSpec& op, const OpOperands& at, float loss_weight,
                  kernels::OpKernels& kernels);

// decode_op run on the CPU's fp32 kernels, wherever its operands live and whatever their storage (bf16/fp16
// widened around the op: kernels::cpu::run_on_cpu). Returns the batch's mean loss for the loss's forward op,
// else 0.
float run_cpu_op(const models::ModelSpec& spec, const models::OpSpec& op, const OpOperands& at, float loss_weight);

}  // namespace ferry::ops
