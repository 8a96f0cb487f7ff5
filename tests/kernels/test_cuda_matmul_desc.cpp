// cuBLASLt descriptions of the row-major matmuls (kernels/cuda/matmul_desc.h), executed by a naive host
// model of cuBLASLt's column-major contract, against kernels::cpu::matmul: every transpose, bias and
// accumulation combination, odd sizes, and the three matmuls of a linear layer's forward and backward.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cuda/matmul_desc.h"
#include "kernels/cpu/matmul.h"

namespace ferry::kernels::cuda {
namespace {

std::vector<float> random_vector(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

void check(int64_t M, int64_t N, int64_t K, bool ta, bool tb, bool bias, bool acc) {
  const auto A = random_vector(M * K, 1), B = random_vector(K * N, 2), b = random_vector(N, 3);
  auto C = random_vector(M * N, 4);
  auto C2 = C;
  if (!acc) std::fill(C2.begin(), C2.end(), std::numeric_limits<float>::quiet_NaN());  // beta 0 must not read C
  kernels::cpu::matmul(C.data(), A.data(), B.data(), bias ? b.data() : nullptr, M, N, K, ta, tb, acc);
  const LtMatmulDesc d = lt_matmul_desc(M, N, K, ta, tb, bias, acc);
  const float* slot_a = d.lt_a == LtOperand::A ? A.data() : B.data();
  const float* slot_b = d.lt_b == LtOperand::A ? A.data() : B.data();
  // the stored layouts cover exactly the operands' elements
  EXPECT_EQ(d.a_rows * d.a_cols, d.lt_a == LtOperand::A ? M * K : K * N);
  EXPECT_EQ(d.b_rows * d.b_cols, d.lt_b == LtOperand::A ? M * K : K * N);
  lt_matmul_reference(d, C2.data(), slot_a, slot_b, b.data());
  for (int64_t i = 0; i < M * N; ++i)
    ASSERT_NEAR(C2[i], C[i], 1e-4f * (1 + std::abs(C[i]))) << M << "x" << N << "x" << K << " ta " << ta << " tb "
                                                           << tb << " bias " << bias << " acc " << acc << " at " << i;
}

TEST(CudaMatmulDesc, EveryLayoutMatchesCpuMatmul) {
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {3, 5, 7}, {17, 9, 33}, {8, 31, 2}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool bias : {false, true})
          for (bool acc : {false, true}) check(M, N, K, ta, tb, bias, acc);
}

// A linear layer's three matmuls as linear.cpp issues them (HF Conv1D weights [IC,OC]):
// out = x W + bias; dx += dout W^T; dW += x^T dout.
TEST(CudaMatmulDesc, LinearLayerMatmuls) {
  const int64_t N = 6, IC = 10, OC = 14;
  check(N, OC, IC, false, false, true, false);
  check(N, IC, OC, false, true, false, true);
  check(IC, OC, N, true, false, false, true);
  const LtMatmulDesc fwd = lt_matmul_desc(N, OC, IC, false, false, true, false);
  EXPECT_EQ(fwd.m, OC);  // the bias runs along cuBLASLt's m
  EXPECT_EQ(fwd.ldc, OC);
  EXPECT_EQ(fwd.beta, 0.0f);
  EXPECT_EQ(lt_matmul_desc(IC, OC, N, true, false, false, true).beta, 1.0f);
}

}  // namespace
}  // namespace ferry::kernels::cuda
