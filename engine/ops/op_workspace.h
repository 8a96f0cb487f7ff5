// The workspace a model's ops take on a device, known before the device is made (its arena is allocated when
// it is): the CUDA kernels declare their scratch, op by op; the host device's (oneDNN's scratchpads) is
// measured while its ops are profiled instead.
#pragma once

#include <cstdint>
#include <functional>

#include "engine/device/device.h"
#include "models/model_spec.h"
#ifdef FERRY_WITH_CUDA
#include "kernels/cuda/attention.h"
#endif

namespace ferry::ops {

// What a device of `kind` takes for `spec`'s ops and its device AdamW: cuda_op_workspace_bytes on the CUDA
// device; 0 on the host device. Throws for the CUDA device in a build without CUDA.
int64_t op_workspace_bytes(device::DeviceKind kind, const models::ModelSpec& spec);

#ifdef FERRY_WITH_CUDA
// Bytes of scratch the attention kernel of a pass takes (on a GPU: the chosen kernel's
// attention_forward/backward_scratch_bytes).
using AttentionScratch = std::function<int64_t(const kernels::cuda::AttentionShape&, DType, models::Pass)>;
// Bytes of the bound workspace `op` uses while it runs on CudaKernels with `compute` storage: its kernels'
// scratch (one after another on the stream, so the largest), cuBLASLt's workspace for a Linear.
int64_t op_scratch_bytes(const models::OpSpec& op, DType compute, const AttentionScratch& attention);
// The largest op_scratch_bytes over every op of `spec`, in the model's precision.
int64_t ops_scratch_bytes(const models::ModelSpec& spec, const AttentionScratch& attention);
// The CUDA device's workspace for `spec`: the largest scratch of any op (ops_scratch_bytes, attention's from
// `attention`) and of the device AdamW over buckets of its parameters (at most one bucket per parameter),
// 256-byte aligned.
int64_t cuda_workspace_bytes(const models::ModelSpec& spec, const AttentionScratch& attention);
// cuda_workspace_bytes with the attention kernels this GPU runs (kernels::cuda::choose_attention_kernel).
int64_t cuda_op_workspace_bytes(const models::ModelSpec& spec);
#endif

}  // namespace ferry::ops
