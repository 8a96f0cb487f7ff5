// The CpuRunner: the resident CPU path lays its activations out once and allocates nothing per step.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "memory/arena.h"
#include "memory/device_allocations.h"
#include "models/cpu_runner.h"
#include "models/gpt2.h"
#include "test_helpers.h"

namespace ferry::models {
namespace {

// Start-up is the construction (the one activation arena) and the first pass (the ops compile and size
// their workspaces, both counted; in bf16/fp16 also the Storage workspace the operands are widened into);
// later passes allocate nothing.
class CpuRunnerIn : public ::testing::TestWithParam<DType> {};

TEST_P(CpuRunnerIn, NothingIsAllocatedAfterTheFirstPass) {
  ModelSpec spec = build_gpt2({2, 2, 32, 256, 16}, 2, 16);
  spec.set_precision(GetParam());
  ParameterStore params(spec.params);
  init_gpt2(spec, {2, 2, 32, 256, 16}, params, 1);
  const int64_t before = memory::DeviceAllocations::count();
  CpuRunner runner(spec, params);
  EXPECT_EQ(memory::DeviceAllocations::count(), before + 1);  // the one arena
  std::vector<int32_t> tokens(32, 7), targets(32, 9);
  runner.set_batch(tokens, targets);
  const float first = runner.forward_backward();
  const int64_t after_start_up = memory::DeviceAllocations::count();
  for (int step = 0; step < 3; ++step) EXPECT_EQ(runner.forward_backward(), first);  // the batch survives each step
  EXPECT_EQ(memory::DeviceAllocations::count(), after_start_up);
}

INSTANTIATE_TEST_SUITE_P(Precisions, CpuRunnerIn, ::testing::Values(DType::F32, DType::BF16, DType::F16),
                         [](const auto& info) { return std::string(to_string(info.param)); });

}  // namespace
}  // namespace ferry::models
