// cuDNN's fused SDPA (cuDNN 9 through cudnn-frontend), loaded at run time: the fast path of attention.h
// where cuDNN is present, recent enough and the storage is bf16/fp16. Built with FERRY_WITH_CUDA; without
// FERRY_CUDNN_FRONTEND_INCLUDE at configure time it compiles to "not available" and callers use the flash
// kernel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "memory/dtype.h"
#include "kernels/cuda/attention.h"

namespace ferry::kernels::cuda {

// cuDNN loaded (libcudnn.so.9: $FERRY_CUDNN_LIB, the loader's path, PyTorch's nvidia/cudnn/lib beside a
// python on PATH), version >= 9.0, bf16 or fp16 storage, head size <= 128 and a multiple of 8.
bool cudnn_sdpa_supports(const AttentionShape& s, DType dtype);
// What cuDNN's execution plans ask for (the largest over the plans of this shape), plus the backward's
// gradient buffers (cuDNN writes them; attention_backward then adds them into the views, or copies them there
// when not accumulating).
size_t cudnn_sdpa_forward_scratch_bytes(const AttentionShape& s, DType dtype);
size_t cudnn_sdpa_backward_scratch_bytes(const AttentionShape& s, DType dtype);
cudaError_t cudnn_sdpa_forward(void* out, float* lse, const void* q, const void* k, const void* v,
                               const int32_t* key_mask, const AttentionShape& s, DType dtype, void* scratch,
                               size_t scratch_bytes, cudaStream_t stream);
cudaError_t cudnn_sdpa_backward(void* dq, void* dk, void* dv, const void* dout, const void* q, const void* k,
                                const void* v, const int32_t* key_mask, const void* out, const float* lse,
                                const AttentionShape& s, bool accumulate, DType dtype, void* scratch,
                                size_t scratch_bytes, cudaStream_t stream);

// Launched for the cuDNN path by attention_flash.cu (kernels live in .cu files):
// seq_q[b] = T and seq_kv[b] = sdpa::keys_before_padding (attention_sdpa_desc.h) of batch row b.
cudaError_t cudnn_seq_lens(int32_t* seq_q, int32_t* seq_kv, const int32_t* key_mask, int64_t B, int64_t T,
                           cudaStream_t stream);
// dst (B,T,C view, rows row_stride apart) += src (B,T,C contiguous), or = src when not accumulating, in storage
// dtype (sdpa::view_index).
cudaError_t write_view(void* dst, const void* src, int64_t B, int64_t T, int64_t C, int64_t row_stride, bool accumulate,
                       DType dtype, cudaStream_t stream);

}  // namespace ferry::kernels::cuda
