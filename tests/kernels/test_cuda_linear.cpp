// Linear on the GPU, on the host: its cuBLASLt descriptions executed naively against the CPU op (built only
// with CUDA: the descriptions live beside cuBLASLt's plans).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/linear.h"
#include "test_helpers.h"

namespace ferry::kernels::cuda {
namespace {

// What cuBLASLt computes for `d` given cpu::matmul's row-major operands A and B.
void run_desc(const LtMatmulDesc& d, float* c, const float* A, const float* B, const float* bias = nullptr) {
  lt_matmul_reference(d, c, d.lt_a == LtOperand::A ? A : B, d.lt_b == LtOperand::A ? A : B, bias);
}

// Linear's three matmuls and its bias epilogue, as described for cuBLASLt, equal the CPU op (forward
// overwrites; backward accumulates into what the gradients held, or writes dx when told), for both weight layouts
// and odd shapes.
TEST(CudaLinear, DescriptionsMatchTheCpuOp) {
  for (const bool out_in : {false, true})
    for (const auto& [rows, in, out] : {std::tuple<int64_t, int64_t, int64_t>{5, 3, 7}, {16, 8, 12}, {1, 9, 2}}) {
      const LinearShape s{rows, in, out, out_in};
      const std::vector<float> x = testing::normal_floats(rows * in, 1), w = testing::normal_floats(in * out, 2),
                               bias = testing::normal_floats(out, 3);
      const std::vector<float> dy = testing::normal_floats(rows * out, 4), dx0 = testing::normal_floats(rows * in, 5),
                               dw0 = testing::normal_floats(in * out, 6);
      std::vector<float> y_cpu(rows * out);
      std::vector<float> y_lt(rows * out, std::numeric_limits<float>::quiet_NaN());  // beta 0 ignores C
      cpu::linear_forward(y_cpu.data(), x.data(), w.data(), bias.data(), rows, in, out, out_in);
      run_desc(linear_forward_desc(s, true), y_lt.data(), x.data(), w.data(), bias.data());
      testing::expect_near(y_lt, y_cpu, "y");

      std::vector<float> dx_cpu = dx0, dw_cpu = dw0, db_cpu(out, 0.0f), dx_lt = dx0, dw_lt = dw0;
      cpu::linear_backward(dx_cpu.data(), dw_cpu.data(), db_cpu.data(), dy.data(), x.data(), w.data(), rows, in, out,
                           out_in);
      run_desc(linear_dx_desc(s), dx_lt.data(), dy.data(), w.data());
      run_desc(linear_dw_desc(s), dw_lt.data(), out_in ? dy.data() : x.data(), out_in ? x.data() : dy.data());
      testing::expect_near(dx_lt, dx_cpu, "dx");
      testing::expect_near(dw_lt, dw_cpu, "dW");

      // Told not to accumulate, dx is written (beta 0: the NaN it held is never read): the CPU op's dx from zeros.
      std::vector<float> dx_zeros(rows * in, 0.0f), dw_unused = dw0, db_unused(out, 0.0f);
      cpu::linear_backward(dx_zeros.data(), dw_unused.data(), db_unused.data(), dy.data(), x.data(), w.data(), rows, in,
                           out, out_in);
      std::vector<float> dx_written(rows * in, std::numeric_limits<float>::quiet_NaN());
      run_desc(linear_dx_desc(s, false), dx_written.data(), dy.data(), w.data());
      testing::expect_near(dx_written, dx_zeros, "dx written");
    }
}

}  // namespace
}  // namespace ferry::kernels::cuda
