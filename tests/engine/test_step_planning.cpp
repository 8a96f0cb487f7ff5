// The step planning's choices that depend on the machine, given fake machines: the device budget (given,
// a GPU's free memory less a margin, or what resident needs on the host device) and the roofline a measured
// GPU cost model fits to its op times.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/step_planning.h"
#include "models/gpt2.h"

namespace ferry::engine {
namespace {

constexpr int64_t GiB = int64_t(1) << 30;
using Kind = device::DeviceChoice::Kind;

TEST(GpuBudget, AGivenBudgetIsKeptOnAnyDevice) {
  const DeviceBudget cuda = resolve_gpu_budget(6 * GiB, Kind::Cuda, {.free_bytes = 70 * GiB, .total_bytes = 80 * GiB});
  EXPECT_EQ(cuda.bytes, 6 * GiB);
  EXPECT_EQ(cuda.note, "");
  EXPECT_EQ(resolve_gpu_budget(6 * GiB, Kind::Host, {}).bytes, 6 * GiB);
  EXPECT_EQ(gpu_budget(48 << 20, Kind::Cuda).bytes, 48 << 20);  // given: no GPU is asked
}

TEST(GpuBudget, OnTheHostDeviceUnsetIsWhatResidentNeeds) {
  const DeviceBudget host = resolve_gpu_budget(0, Kind::Host, {});
  EXPECT_EQ(host.bytes, 0);  // plan_for_config: what resident needs
  EXPECT_EQ(host.note, "unset: what resident needs");
  EXPECT_EQ(gpu_budget(0, Kind::Host).note, host.note);
}

// auto on a GPU: its free memory less max(1 GiB, 5% of the card), said in the start-up line.
TEST(GpuBudget, OnAGpuAutoIsTheFreeMemoryLessAMargin) {
  EXPECT_EQ(gpu_memory_margin(80 * GiB), 4 * GiB);
  EXPECT_EQ(gpu_memory_margin(16 * GiB), GiB);
  const DeviceBudget h100 = resolve_gpu_budget(0, Kind::Cuda, {.free_bytes = 75 * GiB, .total_bytes = 80 * GiB});
  EXPECT_EQ(h100.bytes, 71 * GiB);
  EXPECT_EQ(h100.note, "auto: 75.00 GiB free of 80.00 GiB, less 4.00 GiB kept free (max(1 GiB, 5%))");
  EXPECT_EQ(resolve_gpu_budget(0, Kind::Cuda, {.free_bytes = 10 * GiB, .total_bytes = 16 * GiB}).bytes, 9 * GiB);
}

TEST(GpuBudget, AGpuWithoutRoomIsAnErrorThatSaysWhatToDo) {
  try {
    resolve_gpu_budget(0, Kind::Cuda, {.free_bytes = 3 * GiB, .total_bytes = 80 * GiB});
    FAIL() << "a budget from 3 GiB free on an 80 GiB GPU";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("offload.gpu_budget: auto: the GPU has 3.00 GiB free of 80.00 GiB, within the 4.00 GiB kept free"), std::string::npos)
        << what;
    EXPECT_NE(what.find("set offload.gpu_budget"), std::string::npos) << what;
  }
}

// Op times made from a known roofline (matmuls and attention at F FLOP/s, every other op at B bytes/s) give F and B back.
TEST(FitRoofline, TheFittedRatesReproduceTheOpTimes) {
  models::ModelSpec spec = models::build_gpt2({2, 2, 64, 256, 32}, 2, 32);
  spec.set_precision(DType::BF16);
  const double flops = 3e13, bytes = 9e11;
  offload::CostModel memory_bound;
  memory_bound.flops_per_s = 1e300, memory_bound.memory_bytes_per_s = bytes, memory_bound.op_overhead_s = 0;
  offload::CostModel cost;
  for (const models::OpSpec& op : spec.ops) {
    const bool math = op.kind == models::OpKind::Linear || op.kind == models::OpKind::Attention;
    cost.profiled_op_s.push_back(math ? op.flops / flops : memory_bound.op_seconds(spec, op));
  }
  fit_roofline(spec, cost);
  EXPECT_NEAR(cost.flops_per_s / flops, 1.0, 1e-9);
  EXPECT_NEAR(cost.memory_bytes_per_s / bytes, 1.0, 1e-9);
  cost.profiled_op_s.pop_back();
  EXPECT_THROW(fit_roofline(spec, cost), std::invalid_argument);
}

}  // namespace
}  // namespace ferry::engine
