// LtMatmuls: cuBLASLt plans cached per shape (Linear's dbias is cuda::column_sums, kernels/cuda/ops.h); cuBLASLt
// itself is opened at first use (cublaslt_library.h).
#include <stdexcept>
#include <string>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cublaslt_library.h"
#include "kernels/cuda/linear.h"

namespace ferry::kernels::cuda {
namespace {

#define FERRY_LT(call)                                    \
  do {                                                    \
    const cublasStatus_t status_ = (call);                \
    if (status_ != CUBLAS_STATUS_SUCCESS) return status_; \
  } while (0)

bool data_type(DType t, cudaDataType_t* out) {
  switch (t) {
    case DType::F32: *out = CUDA_R_32F; return true;
    case DType::BF16: *out = CUDA_R_16BF; return true;
    case DType::F16: *out = CUDA_R_16F; return true;
    case DType::I32: break;
  }
  return false;
}

// The largest power of two up to 256 that divides the address (256 for null: an absent bias).
int64_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int64_t align = 256;
  while (align > 1 && a % static_cast<uintptr_t>(align) != 0) align /= 2;
  return align;
}

}  // namespace

struct LtMatmuls::Plan {
  const CublasLtLibrary& lt = cublaslt();
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;  // the heuristic's workspace and waves for the algorithm (LtAlgorithm)
  float waves = 0;
  ~Plan() {
    if (c) lt.layout_destroy(c);
    if (b) lt.layout_destroy(b);
    if (a) lt.layout_destroy(a);
    if (op) lt.desc_destroy(op);
  }

  cublasStatus_t describe(const LtMatmulDesc& d, cudaDataType_t type) {
    FERRY_LT(lt.desc_create(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = d.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    FERRY_LT(lt.desc_set_attribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    FERRY_LT(lt.desc_set_attribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (d.bias_epilogue) {  // the bias vector has D's type (cuBLASLt's default); its pointer is set per call
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      FERRY_LT(lt.desc_set_attribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    }
    FERRY_LT(lt.layout_create(&a, type, static_cast<uint64_t>(d.a_rows), static_cast<uint64_t>(d.a_cols), d.lda));
    FERRY_LT(lt.layout_create(&b, type, static_cast<uint64_t>(d.b_rows), static_cast<uint64_t>(d.b_cols), d.ldb));
    FERRY_LT(lt.layout_create(&c, type, static_cast<uint64_t>(d.m), static_cast<uint64_t>(d.n), d.ldc));
    return CUBLAS_STATUS_SUCCESS;
  }

  // The heuristic's first algorithm for this workspace and these alignments.
  cublasStatus_t choose(cublasLtHandle_t handle, size_t workspace_bytes, const std::array<uint32_t, 4>& align) {
    cublasLtMatmulPreference_t pref = nullptr;
    FERRY_LT(lt.preference_create(&pref));
    const std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, cublasStatus_t (*)(cublasLtMatmulPreference_t)> owned(
        pref, lt.preference_destroy);
    FERRY_LT(lt.preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                         sizeof(workspace_bytes)));
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i) FERRY_LT(lt.preference_set_attribute(pref, which[i], &align[i], sizeof(align[i])));
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    FERRY_LT(lt.algo_get_heuristic(handle, op, a, b, c, c, pref, 1, &heuristic, &found));
    if (found == 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    algo = heuristic.algo, workspace = heuristic.workspaceSize, waves = heuristic.wavesCount;
    return CUBLAS_STATUS_SUCCESS;
  }
};

LtMatmuls::LtMatmuls() {
  const CublasLtLibrary& lt = cublaslt();
  const cublasStatus_t s = lt.create(&handle_);
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cublasLtCreate: ") + lt.status_string(s) + " (is a CUDA device visible?)");
}

LtMatmuls::~LtMatmuls() {
  plans_.clear();  // the descriptors before the handle
  if (handle_) cublaslt().destroy(handle_);
}

cublasStatus_t LtMatmuls::plan_for(const LtMatmulDesc& d, DType type, size_t workspace_bytes,
                                   const std::array<uint32_t, 4>& align, Plan** out) {
  cudaDataType_t t;
  if (!data_type(type, &t)) return CUBLAS_STATUS_INVALID_VALUE;
  const Key key{d.m, d.n, d.k, d.trans_a, d.trans_b, d.a_rows, d.a_cols, d.lda, d.b_rows, d.b_cols, d.ldb, d.ldc,
                d.beta != 0.0f, d.bias_epilogue, static_cast<int64_t>(type), static_cast<int64_t>(workspace_bytes),
                align[0], align[1], align[2], d.lt_a == LtOperand::A};
  auto found = plans_.find(key);
  if (found == plans_.end()) {
    auto plan = std::make_unique<Plan>();
    FERRY_LT(plan->describe(d, t));
    FERRY_LT(plan->choose(handle_, workspace_bytes, align));
    found = plans_.emplace(key, std::move(plan)).first;
  }
  *out = found->second.get();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t LtMatmuls::run(const LtMatmulDesc& d, void* c, const void* A, const void* B, const void* bias,
                              DType type, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (d.bias_epilogue && !bias) return CUBLAS_STATUS_INVALID_VALUE;
  const void* slot_a = d.lt_a == LtOperand::A ? A : B;
  const void* slot_b = d.lt_b == LtOperand::A ? A : B;
  // C and D are one buffer; the bias is read by the epilogue as D's elements, so it shares D's alignment rule.
  const std::array<uint32_t, 4> align{static_cast<uint32_t>(alignment(slot_a)),
                                      static_cast<uint32_t>(alignment(slot_b)),
                                      static_cast<uint32_t>(std::min(alignment(c), alignment(bias))),
                                      static_cast<uint32_t>(std::min(alignment(c), alignment(bias)))};
  Plan* p = nullptr;
  FERRY_LT(plan_for(d, type, workspace_bytes, align, &p));
  const CublasLtLibrary& lt = p->lt;
  if (d.bias_epilogue) FERRY_LT(lt.desc_set_attribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  return lt.matmul(handle_, p->op, &d.alpha, slot_a, p->a, slot_b, p->b, &d.beta, c, p->c, c, p->c, &p->algo, workspace,
                   workspace_bytes, stream);
}

cublasStatus_t LtMatmuls::algorithm(const LtMatmulDesc& d, DType type, size_t workspace_bytes, uint32_t alignment,
                                    LtAlgorithm* out) {
  Plan* p = nullptr;
  FERRY_LT(plan_for(d, type, workspace_bytes, {alignment, alignment, alignment, alignment}, &p));
  const auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attr, auto* value) {
    size_t written = 0;
    return p->lt.algo_config_get_attribute(&p->algo, attr, value, sizeof(*value), &written);
  };
  LtAlgorithm a;
  FERRY_LT(get(CUBLASLT_ALGO_CONFIG_ID, &a.id));
  FERRY_LT(get(CUBLASLT_ALGO_CONFIG_TILE_ID, &a.tile));
  FERRY_LT(get(CUBLASLT_ALGO_CONFIG_STAGES_ID, &a.stages));
  FERRY_LT(get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &a.split_k));
  FERRY_LT(get(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &a.reduction));
  FERRY_LT(get(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &a.swizzle));
  FERRY_LT(get(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &a.cluster));
  a.workspace = p->workspace, a.waves = p->waves;
  *out = a;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace ferry::kernels::cuda
