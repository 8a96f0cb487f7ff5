// Attention on the GPU, forward and backward, beside the CPU op (kernels/cpu/attention.cpp) with its math and
// masks: a flash-style kernel (any storage, fp32 accumulation; the fp32 path and the reference) and cuDNN's
// fused SDPA where cuDNN loads. Both keep the softmax's log-sum-exp per query in place of the probabilities.
// Built only with FERRY_WITH_CUDA. The flash kernels: attention_flash.cu, their per-thread math in
// attention_math.h and host twin in attention_twin.h; cuDNN: attention_cudnn.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "memory/dtype.h"

namespace ferry::kernels::cuda {

// q, k, v: (B,T,C) views with rows row_stride elements apart (GPT-2's packed qkv: row_stride 3C; BERT: C);
// NH heads of hs = C/NH; key_mask (B,T) int32 (0: padding) or null; causal: GPT-2. The flash kernel takes
// head sizes up to 128 (others: cudaErrorInvalidValue) and any mask; cuDNN's padding mask is a key count per
// batch row, so with CudnnSdpa the padding must be trailing (BERT's batches: tokens, then padding).
// Grouped-query attention (Llama): k, v are (B,T,kv_heads*hs) views with rows kv_row_stride apart, query
// head h reading key/value head h / (NH/kv_heads); 0 in either: kv_heads = NH, kv_row_stride = row_stride.
struct AttentionShape {
  int64_t B, T, C, NH, row_stride;
  bool causal;
  int64_t kv_heads = 0, kv_row_stride = 0;
};

enum class AttentionKernel { Flash, CudnnSdpa };

// Whether cuDNN's SDPA can run this shape and storage here (cuDNN loaded at run time, recent enough, bf16 or
// fp16, head size it supports). FERRY_ATTENTION=flash in the environment forces the flash kernel: the way to
// run compute-sanitizer on Ferry's kernels alone (cuDNN's Hopper kernels draw racecheck and initcheck reports).
bool cudnn_sdpa_available(const AttentionShape& s, DType dtype);

// Scratch bytes the pass needs (the caller's workspace, planned before the first step). Flash: none forward,
// D = rowsum(dout * out) (B,NH,T) fp32 backward. cuDNN: its plan's workspace (the plan is built here on first
// ask), plus the backward's dq/dk/dv buffers.
size_t attention_forward_scratch_bytes(AttentionKernel kernel, const AttentionShape& s, DType dtype);
size_t attention_backward_scratch_bytes(AttentionKernel kernel, const AttentionShape& s, DType dtype);

// out (B,T,C) = softmax(q k^T / sqrt(hs), masked) v per head; lse (B,NH,T) fp32: each query's log-sum-exp of
// its scaled, masked scores (-inf-safe: a query with no visible key gets out 0).
cudaError_t attention_forward(AttentionKernel kernel, void* out, float* lse, const void* q, const void* k,
                              const void* v, const int32_t* key_mask, const AttentionShape& s, DType dtype,
                              void* scratch, size_t scratch_bytes, cudaStream_t stream);
// dq, dk, dv (the same views as q, k, v) += the gradients, from dout and the forward's out and lse
// (produced by the same kernel); not accumulating: = the gradients, every element of the views (0 for a masked
// key), the old values never read. Deterministic: no float atomics (flash: one block per key tile for dk/dv,
// one per query tile for dq; cuDNN: its deterministic algorithm, into scratch, then added or copied).
cudaError_t attention_backward(AttentionKernel kernel, void* dq, void* dk, void* dv, const void* dout, const void* q,
                               const void* k, const void* v, const int32_t* key_mask, const void* out, const float* lse,
                               const AttentionShape& s, bool accumulate, DType dtype, void* scratch,
                               size_t scratch_bytes, cudaStream_t stream);

}  // namespace ferry::kernels::cuda
