// The host memory estimate: its parts are the allocations the trainer makes (the pinned pool of host buckets
// and staging, the host device's op scratch and arena; no copy of the model), what the machine has is read or
// given, and a run that does not fit says by how much and what to do.
#include <gtest/gtest.h>

#include <cstdlib>

#include "engine/executor.h"
#include "engine/host_memory.h"
#include "engine/host_optimizer.h"
#include "memory/host_buckets.h"
#include "memory/planner.h"
#include "models/gpt2.h"
#include "offload/cost_model.h"

namespace ferry::engine {
namespace {

// policy greedy: a budget this large puts every bucket in the device tier; zero-offload: none.
offload::StepPlan small_plan(const models::ModelSpec& spec, offload::Policy policy = offload::Policy::ZeroOffload) {
  offload::PlanRequest request;
  request.bucket_bytes = 64 << 10;
  request.budget_bytes = int64_t(1) << 30;
  request.policy = policy;
  return offload::plan_step(spec, offload::CostModel{}, request);
}

TEST(HostMemory, TheEstimateIsTheTrainersAllocations) {
  models::ModelSpec spec = models::build_gpt2({2, 2, 64, 256, 32}, 2, 32);
  spec.set_precision(DType::BF16);
  const offload::StepPlan plan = small_plan(spec);
  const HostMemoryEstimate gpu = estimate_host_memory(spec, plan, false), host = estimate_host_memory(spec, plan, true);
  EXPECT_EQ(gpu.host_buckets, memory::HostBuckets::bytes_needed(plan.problem.layout, DType::BF16, DType::BF16, false,
                                                                memory::HostBuckets::GradLanding::OnWorkingCopy) +
                                  Executor::host_bytes_needed(spec, plan));
  EXPECT_EQ(gpu.op_scratch, 0);
  EXPECT_EQ(gpu.device_arena, 0);
  EXPECT_EQ(host.device_arena, plan.memory.layout.peak);
  EXPECT_GT(host.op_scratch, 0);  // the host device widens bf16 operands to fp32 around its ops
  EXPECT_EQ(host.total(), gpu.total() + host.op_scratch + plan.memory.layout.peak);
  EXPECT_NE(host.describe().find("host device arena"), std::string::npos) << host.describe();
  EXPECT_EQ(gpu.describe().find("host device arena"), std::string::npos) << gpu.describe();
}

// The exact state in bf16: master, m, v in fp32 and one bf16 region where the gradients land on the working
// copy (one micro-batch a step): 14 bytes a parameter; 16 where a second micro-batch reads the working copy
// after the first one's gradients landed. No model copy beside them.
TEST(HostMemory, TheExactStateTakesFourteenBytesAParameterWhereItsGradientsLandOnItsWorkingCopy) {
  models::ModelSpec spec = models::build_gpt2({4, 4, 128, 256, 32}, 2, 32);
  spec.set_precision(DType::BF16);
  const offload::StepPlan plan = small_plan(spec);
  ASSERT_EQ(Executor::gradient_landing(plan), memory::HostBuckets::GradLanding::OnWorkingCopy);
  const double params = static_cast<double>(spec.param_count());
  const auto bucket_bytes = [&](const offload::StepPlan& p) {
    return static_cast<double>(estimate_host_memory(spec, p, false).host_buckets -
                               Executor::host_bytes_needed(spec, p));
  };
  const double padding = 5.0 * 4096 * (plan.problem.n_buckets + 1) / params;  // a page a region
  EXPECT_GE(bucket_bytes(plan) / params, 14.0);
  EXPECT_LE(bucket_bytes(plan) / params, 14.0 + padding);
  offload::PlanRequest accumulating;
  accumulating.bucket_bytes = 64 << 10, accumulating.budget_bytes = int64_t(1) << 30, accumulating.grad_accum = 2;
  accumulating.policy = offload::Policy::ZeroOffload;
  const offload::StepPlan two = offload::plan_step(spec, offload::CostModel{}, accumulating);
  EXPECT_EQ(Executor::gradient_landing(two), memory::HostBuckets::GradLanding::OwnRegion);
  EXPECT_GE(bucket_bytes(two) / params, 16.0);
}

// The device tier (AdamW on the device, its whole state in the arena) holds no host copy: the estimate, which
// ferry train pins and ferry plan --max-model fits, leaves its 14 bytes a parameter out.
TEST(HostMemory, TheDeviceTierTakesNoHostBytes) {
  models::ModelSpec spec = models::build_gpt2({4, 4, 128, 256, 32}, 2, 32);
  spec.set_precision(DType::BF16);
  const offload::StepPlan plan = small_plan(spec, offload::Policy::Greedy);
  const std::vector<bool> device_only = Executor::device_only_buckets(plan);
  int64_t device_numel = 0;
  for (int b = 0; b < plan.problem.n_buckets; ++b) {
    EXPECT_EQ(device_only[b], plan.schedule.device_optimizer[b] && plan.problem.first_grad_op[b] >= 0) << b;
    if (device_only[b]) device_numel += plan.problem.bucket_numel(b);
  }
  ASSERT_GT(device_numel, 0) << plan.schedule.label() << ": no device tier, the test would check nothing";
  const auto landing = memory::HostBuckets::GradLanding::OnWorkingCopy;
  const int64_t with_copy =
      memory::HostBuckets::bytes_needed(plan.problem.layout, DType::BF16, DType::BF16, false, landing);
  const int64_t buckets =
      estimate_host_memory(spec, plan, false).host_buckets - Executor::host_bytes_needed(spec, plan);
  EXPECT_EQ(buckets, memory::HostBuckets::bytes_needed(plan.problem.layout, DType::BF16, DType::BF16, false, landing,
                                                       device_only));
  EXPECT_GE(with_copy - buckets, 14 * device_numel);
  // Nor do the executor's extra buffers take any for it: with a second micro-batch, fp32 gradient sums (a page
  // each at least) for the buckets the CPU updates only.
  offload::PlanRequest accumulating;
  accumulating.bucket_bytes = 64 << 10, accumulating.budget_bytes = int64_t(1) << 30, accumulating.grad_accum = 2;
  const offload::StepPlan two = offload::plan_step(spec, offload::CostModel{}, accumulating);
  const std::vector<bool> two_device_only = Executor::device_only_buckets(two);
  int64_t sums = 0, in_tier = 0;
  for (int b = 0; b < two.problem.n_buckets; ++b) {
    in_tier += two_device_only[b];
    if (!two_device_only[b] && two.problem.first_grad_op[b] >= 0)
      sums += (two.problem.bucket_numel(b) * 4 + 4095) / 4096 * 4096;
  }
  ASSERT_GT(in_tier, 0) << two.schedule.label();
  EXPECT_EQ(HostOptimizer::bytes_needed(two.problem, false, two_device_only), sums);
}

TEST(HostMemory, AvailableMemoryIsReadOrGiven) {
  unsetenv("FERRY_HOST_MEMORY_AVAILABLE");
  EXPECT_GT(available_host_memory(), 0);  // /proc/meminfo's MemAvailable
  setenv("FERRY_HOST_MEMORY_AVAILABLE", "1.5GiB", 1);
  EXPECT_EQ(available_host_memory(), int64_t(3) << 29);
  setenv("FERRY_HOST_MEMORY_AVAILABLE", "lots", 1);
  EXPECT_THROW(available_host_memory(), std::runtime_error);
  unsetenv("FERRY_HOST_MEMORY_AVAILABLE");
}

TEST(HostMemory, AShortfallSaysByHowMuchAndWhatToDo) {
  HostMemoryEstimate e;
  e.host_buckets = 600 << 20, e.op_scratch = 300 << 20, e.device_arena = 124 << 20;
  EXPECT_EQ(host_memory_shortfall(e, e.total(), int64_t(1) << 30), "");
  EXPECT_EQ(host_memory_shortfall(e, e.total(), -1), "");  // unknown: not refused
  const std::string plan = host_memory_shortfall(e, e.total(), 512 << 20);
  EXPECT_NE(plan.find("this run needs 1.00 GiB (host buckets 600.0 MiB, host device op scratch 300.0 MiB, "
                      "host device arena 124.0 MiB), 512.0 MiB more than the 512.0 MiB available"),
            std::string::npos)
      << plan;
  const std::string train = host_memory_shortfall(e, e.host_buckets + e.device_arena, 512 << 20);
  EXPECT_NE(train.find("the 724.0 MiB still to allocate is 212.0 MiB more than the 512.0 MiB available"), std::string::npos) << train;
  EXPECT_NE(train.find("offload.gpu_budget"), std::string::npos) << train;
}

}  // namespace
}  // namespace ferry::engine
