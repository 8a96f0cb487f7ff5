// Dense fp32 matmul on the CPU through oneDNN's matmul primitive, created once per shape and cached.
#pragma once

#include <cstdint>

namespace ferry::models::ops {

// C (M,N) = op(A) (M,K) @ op(B) (K,N) [+ bias (N)] [+ C if accumulate]. All row-major and dense.
// trans_a: A is stored (K,M). trans_b: B is stored (N,K).
void matmul(float* C, const float* A, const float* B, const float* bias, int64_t M, int64_t N, int64_t K,
            bool trans_a, bool trans_b, bool accumulate);

// Threads oneDNN may use (its OpenMP runtime); 0 leaves the runtime's default (all cores).
void set_matmul_threads(int threads);

}  // namespace ferry::models::ops
