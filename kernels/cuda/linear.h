// Linear on the GPU (the CPU op: kernels/cpu/linear.cpp): its three matmuls as cuBLASLt descriptions (pure,
// tested on the host against the CPU op), cuBLASLt's handle with each shape's descriptors and algorithm chosen
// once and cached, and dbias by its own deterministic column sums. Built only with FERRY_WITH_CUDA.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "memory/dtype.h"
#include "kernels/cuda/matmul_desc.h"

namespace ferry::kernels::cuda {

// x (rows, in) -> y (rows, out); W stored [in, out] (HF Conv1D), or [out, in] when weight_out_in (nn.Linear).
struct LinearShape {
  int64_t rows, in, out;
  bool weight_out_in;
};

// y = x @ W (+ bias through the epilogue).
constexpr LtMatmulDesc linear_forward_desc(const LinearShape& s, bool bias) {
  return lt_matmul_desc(s.rows, s.out, s.in, false, s.weight_out_in, bias, false);
}
// dx (rows, in) += dy @ W^T (beta 1), or = when not accumulating (beta 0: dx never read): W [in, out] read
// transposed, [out, in] as it is.
constexpr LtMatmulDesc linear_dx_desc(const LinearShape& s, bool accumulate = true) {
  return lt_matmul_desc(s.rows, s.in, s.out, false, !s.weight_out_in, false, accumulate);
}
// dW += x^T @ dy (in, out) (always beta 1: a parameter's gradient), or dy^T @ x (out, in) when weight_out_in:
// cpu::matmul's A is x and B dy, or A dy and B x when weight_out_in (the caller passes them so).
constexpr LtMatmulDesc linear_dw_desc(const LinearShape& s) {
  return s.weight_out_in ? lt_matmul_desc(s.out, s.in, s.rows, true, false, false, true)
                         : lt_matmul_desc(s.in, s.out, s.rows, true, false, false, true);
}

// The algorithm cuBLASLt's heuristic gave a plan, as its configuration attributes name it (cublasLt.h's
// CUBLASLT_ALGO_CONFIG_*), with the workspace it needs and its waves (1: one full wave of the GPU's SMs).
struct LtAlgorithm {
  int32_t id = 0, split_k = 0;
  uint32_t tile = 0, stages = 0, reduction = 0, swizzle = 0;
  uint16_t cluster = 0;  // Hopper's thread-block cluster shape id (0: cuBLASLt's choice)
  size_t workspace = 0;
  float waves = 0;
};

// cuBLASLt's handle (RAII) and a plan per matmul shape: descriptors, layouts and the heuristic's first
// algorithm for the workspace given, made the first time the shape runs (the executor's warm-up) and reused,
// so the same shape runs the same algorithm, hence the same bits, every step. Not thread-safe: one caller.
class LtMatmuls {
 public:
  LtMatmuls();  // throws std::runtime_error when cuBLASLt cannot start
  ~LtMatmuls();
  LtMatmuls(const LtMatmuls&) = delete;
  LtMatmuls& operator=(const LtMatmuls&) = delete;

  // c = op(A) @ op(B) [+ bias] [+ c] as `d` describes (A, B: cpu::matmul's row-major operands), operands, C
  // and bias stored as `type`, fp32 accumulation. `workspace` (the plan's) holds workspace_bytes.
  cublasStatus_t run(const LtMatmulDesc& d, void* c, const void* A, const void* B, const void* bias, DType type,
                     void* workspace, size_t workspace_bytes, cudaStream_t stream);

  // The algorithm run() uses for `d` when every operand is `alignment`-byte aligned (the plan is made and kept
  // as run() would make it).
  cublasStatus_t algorithm(const LtMatmulDesc& d, DType type, size_t workspace_bytes, uint32_t alignment,
                           LtAlgorithm* out);

 private:
  struct Plan;
  cublasStatus_t plan_for(const LtMatmulDesc& d, DType type, size_t workspace_bytes,
                          const std::array<uint32_t, 4>& align, Plan** out);
  // Everything the plan depends on: the description, the type, the workspace and the operands' alignment
  // (the heuristic only offers algorithms that work with pointers as aligned as the ones it was shown).
  using Key = std::array<int64_t, 20>;
  cublasLtHandle_t handle_ = nullptr;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace ferry::kernels::cuda
