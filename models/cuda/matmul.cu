// cuBLASLt execution of a matmul description: descriptors, layouts, the heuristic's algorithm, the call.
// Descriptors are made per call for now; caching them per shape is the next step (issue 15).
#include "models/cuda/matmul.h"

namespace ferry::cuda {
namespace {

// cuBLASLt's handles freed on every path out.
struct LtObjects {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtObjects() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

bool data_type(DType t, cudaDataType_t* out) {
  switch (t) {
    case DType::F32: *out = CUDA_R_32F; return true;
    case DType::BF16: *out = CUDA_R_16BF; return true;
    case DType::F16: *out = CUDA_R_16F; return true;
    case DType::I32: break;
  }
  return false;
}

#define FERRY_LT(call)                                    \
  do {                                                    \
    const cublasStatus_t status_ = (call);                \
    if (status_ != CUBLAS_STATUS_SUCCESS) return status_; \
  } while (0)

cublasStatus_t describe(LtObjects& o, const LtMatmulDesc& d, const void* bias, cudaDataType_t type) {
  FERRY_LT(cublasLtMatmulDescCreate(&o.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = d.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  FERRY_LT(cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  FERRY_LT(cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (d.bias_epilogue) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    FERRY_LT(cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    FERRY_LT(cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  FERRY_LT(cublasLtMatrixLayoutCreate(&o.a, type, static_cast<uint64_t>(d.a_rows), static_cast<uint64_t>(d.a_cols), d.lda));
  FERRY_LT(cublasLtMatrixLayoutCreate(&o.b, type, static_cast<uint64_t>(d.b_rows), static_cast<uint64_t>(d.b_cols), d.ldb));
  FERRY_LT(cublasLtMatrixLayoutCreate(&o.c, type, static_cast<uint64_t>(d.m), static_cast<uint64_t>(d.n), d.ldc));
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t lt_matmul(cublasLtHandle_t handle, const LtMatmulDesc& d, void* c, const void* A, const void* B,
                         const void* bias, DType type, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  cudaDataType_t t;
  if (!data_type(type, &t)) return CUBLAS_STATUS_INVALID_VALUE;
  LtObjects o;
  FERRY_LT(describe(o, d, bias, t));
  FERRY_LT(cublasLtMatmulPreferenceCreate(&o.pref));
  FERRY_LT(cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                                sizeof(workspace_bytes)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  FERRY_LT(cublasLtMatmulAlgoGetHeuristic(handle, o.op, o.a, o.b, o.c, o.c, o.pref, 1, &heuristic, &found));
  if (found == 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  const void* slot_a = d.lt_a == LtOperand::A ? A : B;
  const void* slot_b = d.lt_b == LtOperand::A ? A : B;
  return cublasLtMatmul(handle, o.op, &d.alpha, slot_a, o.a, slot_b, o.b, &d.beta, c, o.c, c, o.c, &heuristic.algo,
                        workspace, workspace_bytes, stream);
}

}  // namespace ferry::cuda
