// fp32 matmuls on the CPU through oneDNN's matmul primitive (plain and batched-strided), each primitive
// created once per shape and cached.
#pragma once

#include <cstdint>

namespace ferry::kernels::cpu {

// C (M,N) = op(A) (M,K) @ op(B) (K,N) [+ bias (N)] [+ C if accumulate]. All row-major and dense.
// trans_a: A is stored (K,M). trans_b: B is stored (N,K).
void matmul(float* C, const float* A, const float* B, const float* bias, int64_t M, int64_t N, int64_t K,
            bool trans_a, bool trans_b, bool accumulate);

// A batch of (batch x heads) matrices inside a larger buffer: element (b, h, row, col) lives at
// ptr[b*batch + h*head + row*row_stride + col*col_stride]. Lets attention read q, k, v straight out of
// the packed qkv tensor and read a matrix transposed by swapping its row and column strides.
struct StridedBatch {
  int64_t batch, head, row, col;
};

// C (B,H,M,N) = A (B,H,M,K) @ B_ (B,H,K,N) [+ C if accumulate], each operand with its own strides.
void batched_matmul(float* C, StridedBatch c, const float* A, StridedBatch a, const float* B_, StridedBatch b,
                    int64_t B, int64_t H, int64_t M, int64_t N, int64_t K, bool accumulate);

// Threads oneDNN may use (its OpenMP runtime); 0 leaves the runtime's default (all cores).
void set_matmul_threads(int threads);

}  // namespace ferry::kernels::cpu
