// The cuBLASLt description of one row-major matmul of kernels/cpu/matmul.h, as a pure function: which operand
// goes where, transposes, leading dimensions, beta (1 accumulates gradients) and the bias epilogue. cuBLASLt
// is column-major, so C (M,N) = op(A) @ op(B) row-major is computed as C^T (N,M) = op(B)^T @ op(A)^T: a
// row-major (r,c) matrix is the column-major (c,r) one with leading dimension c, no copy.
#pragma once

#include <cstdint>

namespace ferry::kernels::cuda {

enum class LtOperand { A, B };  // which row-major operand of cpu::matmul a cuBLASLt slot reads

struct LtMatmulDesc {
  // D (m,n) = op(Lt A) (m,k) @ op(Lt B) (k,n) [+ beta C] [+ bias (m)], column-major, C and D the same buffer.
  int64_t m, n, k;
  LtOperand lt_a, lt_b;
  bool trans_a, trans_b;               // CUBLAS_OP_T on the slot
  int64_t a_rows, a_cols, lda;         // the stored column-major layouts (cublasLtMatrixLayoutCreate)
  int64_t b_rows, b_cols, ldb;
  int64_t ldc;                         // C and D: (m, n), ld m
  float alpha, beta;
  bool bias_epilogue;                  // CUBLASLT_EPILOGUE_BIAS: bias (m) added to every column of D
};

// C (M,N) = op(A) (M,K) @ op(B) (K,N) [+ bias (N)] [+ C if accumulate]; trans_a: A stored (K,M);
// trans_b: B stored (N,K) (the arguments of cpu::matmul).
constexpr LtMatmulDesc lt_matmul_desc(int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b, bool bias,
                                      bool accumulate) {
  LtMatmulDesc d{};
  d.m = N, d.n = M, d.k = K;
  // Slot A is our B: stored row-major (K,N) = column-major (N,K), ld N, which is op(B)^T untransposed;
  // stored (N,K) when trans_b: column-major (K,N), ld K, transposed to (N,K).
  d.lt_a = LtOperand::B, d.trans_a = trans_b;
  d.a_rows = trans_b ? K : N, d.a_cols = trans_b ? N : K, d.lda = d.a_rows;
  // Slot B is our A: stored (M,K) = column-major (K,M), ld K; stored (K,M) when trans_a: (M,K), ld M.
  d.lt_b = LtOperand::A, d.trans_b = trans_a;
  d.b_rows = trans_a ? M : K, d.b_cols = trans_a ? K : M, d.ldb = d.b_rows;
  d.ldc = N;
  d.alpha = 1.0f, d.beta = accumulate ? 1.0f : 0.0f;
  d.bias_epilogue = bias;  // our bias runs along N, which is cuBLASLt's m: the epilogue's bias vector
  return d;
}

// What cuBLASLt computes for a description, naively on the host (the reference the tests hold the
// description against): D[i + j ldc] = alpha sum_p opA(i,p) opB(p,j) + beta C[..] + bias[i].
inline void lt_matmul_reference(const LtMatmulDesc& d, float* c, const float* slot_a, const float* slot_b,
                                const float* bias) {
  for (int64_t j = 0; j < d.n; ++j)
    for (int64_t i = 0; i < d.m; ++i) {
      double s = 0;
      for (int64_t p = 0; p < d.k; ++p) {
        const float a = d.trans_a ? slot_a[p + i * d.lda] : slot_a[i + p * d.lda];
        const float b = d.trans_b ? slot_b[j + p * d.ldb] : slot_b[p + j * d.ldb];
        s += static_cast<double>(a) * b;
      }
      float& out = c[i + j * d.ldc];
      float v = d.alpha * static_cast<float>(s);
      if (d.beta != 0.0f) v += d.beta * out;  // beta 0 never reads C (it may hold NaN garbage)
      if (d.bias_epilogue) v += bias[i];
      out = v;
    }
}

}  // namespace ferry::kernels::cuda
