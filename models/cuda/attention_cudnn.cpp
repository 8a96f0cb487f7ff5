// placeholder while the flash kernels build: replaced below
#include "models/cuda/attention_cudnn.h"
namespace ferry::cuda {
bool cudnn_sdpa_supports(const AttentionShape&, DType) { return false; }
size_t cudnn_sdpa_forward_scratch_bytes(const AttentionShape&, DType) { return 0; }
size_t cudnn_sdpa_backward_scratch_bytes(const AttentionShape&, DType) { return 0; }
cudaError_t cudnn_sdpa_forward(void*, float*, const void*, const void*, const void*, const int32_t*, const AttentionShape&, DType, void*, size_t, cudaStream_t) { return cudaErrorNotSupported; }
cudaError_t cudnn_sdpa_backward(void*, void*, void*, const void*, const void*, const void*, const void*, const int32_t*, const void*, const float*, const AttentionShape&, DType, void*, size_t, cudaStream_t) { return cudaErrorNotSupported; }
}
