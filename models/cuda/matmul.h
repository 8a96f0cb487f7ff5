// A row-major matmul of models/ops/matmul.h run by cuBLASLt from its description (matmul_desc.h): fp32
// compute, operands, C and bias in one storage type. Built only with FERRY_WITH_CUDA.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "memory/dtype.h"
#include "models/cuda/matmul_desc.h"

namespace ferry::cuda {

// c = op(A) @ op(B) [+ bias] [+ c] as `d` describes (lt_matmul_desc). `workspace` is the caller's, planned
// before the first step (cuBLASLt allocates nothing itself when given one). The algorithm is the
// heuristic's first choice for the shape, so the same shape gives the same bits run after run.
cublasStatus_t lt_matmul(cublasLtHandle_t handle, const LtMatmulDesc& d, void* c, const void* A, const void* B,
                         const void* bias, DType type, void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace ferry::cuda
