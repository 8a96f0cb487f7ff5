// What the CUDA device computes for the host (with a GPU; skipped without one): its AdamW against the host
// device's, bitwise, and the loss reaching the host with its gradient counting the targets (built only with
// CUDA).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "engine/device/cuda_device.h"
#include "engine/device/cuda_devices.h"
#include "engine/device/make_device.h"
#include "engine/ops/op_dispatch.h"
#include "memory/convert.h"
#include "models/registry.h"
#include "test_helpers.h"

namespace ferry::device {
namespace {

#define REQUIRE_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

// A host image of device memory, copied into a device's arena, run on, and copied back.
struct Staging {
  Device& dev;
  std::unique_ptr<memory::PinnedHostPool> pool;
  std::byte* host;
  int64_t bytes;
  Staging(Device& d, int64_t n) : dev(d), pool(d.make_host_pool(n)), host(pool->carve(n)), bytes(n) {
    std::memset(host, 0, static_cast<size_t>(n));  // every byte compared is one the test wrote
  }
  std::byte* at(int64_t offset) const { return dev.arena().data() + offset; }
  void up() {
    dev.copy(Stream::H2D, dev.arena().data(), host, bytes, "up");
    dev.wait(Stream::Compute, dev.record(Stream::H2D), "up");
  }
  void down() {
    dev.wait(Stream::D2H, dev.record(Stream::Compute), "down");
    dev.copy(Stream::D2H, host, dev.arena().data(), bytes, "down");
    dev.synchronize();
  }
};

struct AdamWRun {
  std::vector<std::byte> memory;
  cpu_optim::StepDecision decision;
};

// Three buckets (fp32 and bf16 gradients, a bf16 working copy) on `kind`, one AdamW step.
AdamWRun run_adamw(DeviceChoice::Kind kind, float max_norm, float loss_scale, bool poison) {
  const std::vector<int64_t> sizes{1000, 4099, 1};
  const std::vector<DType> grad_types{DType::F32, DType::BF16, DType::F32};
  const int64_t per = 4 * 3 + 4 + 2, region = 8192 * per;  // master, m, v, fp32-sized gradient, bf16 working copy
  const int64_t workspace = device_adamw_scratch_bytes(3);
  const auto dev = make_device({.kind = kind, .arena_bytes = 3 * region + workspace});
  Staging st(*dev, 3 * region);
  std::vector<Device::OptimizerBucket> buckets;
  for (size_t b = 0; b < sizes.size(); ++b) {
    const int64_t n = sizes[b], base = static_cast<int64_t>(b) * region;
    std::vector<float> master = testing::normal_floats(n, 11 + b), m = testing::normal_floats(n, 21 + b),
                       v = testing::normal_floats(n, 31 + b);
    std::vector<float> g = testing::normal_floats(n, 41 + b);
    for (float& x : v) x = std::fabs(x);
    for (float& x : g) x *= 300.0f;  // scaled by the loss scale, as fp16 training keeps them
    if (poison && b == 1) g[17] = std::numeric_limits<float>::infinity();
    std::memcpy(st.host + base, master.data(), n * 4), std::memcpy(st.host + base + n * 4, m.data(), n * 4);
    std::memcpy(st.host + base + 2 * n * 4, v.data(), n * 4);
    memory::narrow(st.host + base + 3 * n * 4, grad_types[b], g.data(), n);
    memory::narrow(st.host + base + 4 * n * 4, DType::BF16, master.data(), n);
    auto* state = reinterpret_cast<float*>(st.at(base));
    buckets.push_back({state, state + n, state + 2 * n, st.at(base + 3 * n * 4), grad_types[b], st.at(base + 4 * n * 4),
                       DType::BF16, n});
  }
  dev->bind_workspace(dev->arena().data() + 3 * region, workspace);
  st.up();
  AdamWRun r;
  dev->adamw(buckets, {3e-4, 0.9, 0.95, 1e-8, 0.1}, 7, 2e-4, max_norm, loss_scale, &r.decision, "adamw");
  st.down();
  r.memory.assign(st.host, st.host + st.bytes);
  return r;
}

// The device AdamW gives the host device's weights, moments and working copy bitwise (the same per-element
// function and coefficients; no clipping, so the scale is exactly 1 / loss scale), and an inf skips the step.
TEST(CudaDeviceGpu, AdamWEqualsTheHostDevice) {
  REQUIRE_GPU();
  for (const bool poison : {false, true}) {
    const AdamWRun gpu = run_adamw(DeviceChoice::Kind::Cuda, 0.0f, 1024.0f, poison);
    const AdamWRun cpu = run_adamw(DeviceChoice::Kind::Host, 0.0f, 1024.0f, poison);
    EXPECT_TRUE(gpu.memory == cpu.memory) << (poison ? "skipped step" : "step");
    EXPECT_EQ(gpu.decision.report.skipped, poison);
    EXPECT_EQ(cpu.decision.report.skipped, poison);
    EXPECT_EQ(gpu.decision.grad_scale, cpu.decision.grad_scale);
    if (!poison) {
      EXPECT_NEAR(gpu.decision.report.grad_norm, cpu.decision.report.grad_norm, 1e-9 * cpu.decision.report.grad_norm);
    }
  }
  // Clipping: the norms are summed in other orders, so the scales agree to rounding.
  const AdamWRun gpu = run_adamw(DeviceChoice::Kind::Cuda, 1.0f, 1024.0f, false);
  const AdamWRun cpu = run_adamw(DeviceChoice::Kind::Host, 1.0f, 1024.0f, false);
  EXPECT_NEAR(gpu.decision.grad_scale, cpu.decision.grad_scale, 1e-6 * cpu.decision.grad_scale);
  EXPECT_LT(gpu.decision.grad_scale, 1.0f / 1024.0f);
}

// The loss's forward leaves the mean over the counted targets in *loss once the stream has passed it (no
// wait inside the op), and its backward scales by the count the device made; both against the CPU op.
TEST(CudaDeviceGpu, LossReachesTheHostAndItsGradientCountsTargets) {
  REQUIRE_GPU();
  const models::ModelSpec spec = models::build_model({"gpt2", 1, 2, 16, 50, 8, {}, {}}, 3, 8, DType::F32);
  const models::OpSpec* fwd = nullptr;
  const models::OpSpec* bwd = nullptr;
  for (const models::OpSpec& op : spec.ops)
    if (op.kind == models::OpKind::CrossEntropy) (op.pass == models::Pass::Forward ? fwd : bwd) = &op;
  ASSERT_TRUE(fwd && bwd);
  // V: the logits' row (the padded vocabulary); targets only name the real tokens (attrs.out), as every batch does.
  const int64_t N = fwd->attrs.rows, V = fwd->attrs.in, real_vocab = fwd->attrs.out;
  ASSERT_LT(real_vocab, V) << "the test wants padded columns, which no target names";
  const int64_t logits_at = 0, targets_at = N * V * 4, losses_at = targets_at + N * 4, dlogits_at = losses_at + N * 4;
  const int64_t bytes = dlogits_at + N * V * 4;
  const auto dev = make_device({.kind = DeviceChoice::Kind::Cuda, .arena_bytes = bytes + 4096});
  dev->bind_workspace(dev->arena().data() + (bytes + 255) / 256 * 256, 256);
  Staging st(*dev, bytes);
  const std::vector<float> logits = testing::normal_floats(N * V, 5);
  std::vector<int32_t> targets(N);
  for (int64_t i = 0; i < N; ++i) targets[i] = i % 3 == 1 ? -100 : static_cast<int32_t>((i * 7) % real_vocab);
  std::memcpy(st.host + logits_at, logits.data(), N * V * 4), std::memcpy(st.host + targets_at, targets.data(), N * 4);
  std::memset(st.host + dlogits_at, 0, N * V * 4);
  const auto operand = [&](int64_t offset, DType t) { return kernels::Operand{st.at(offset), t}; };
  const std::vector<kernels::Operand> in{operand(logits_at, DType::F32), operand(targets_at, DType::I32)};
  const std::vector<kernels::Operand> losses{operand(losses_at, DType::F32)}, dlogits{operand(dlogits_at, DType::F32)};
  const std::vector<kernels::Operand> bwd_in{in[0], in[1], losses[0]};  // the backward reads the forward's losses
  st.up();
  float loss = -1;
  dev->run_op(ops::decode_op(spec, *fwd, {in, losses, {}, {}}, 1.0f), &loss, "loss.fwd");
  dev->run_op(ops::decode_op(spec, *bwd, {bwd_in, dlogits, {}, {}}, 0.5f), nullptr, "loss.bwd");
  st.down();

  std::vector<float> cpu_losses(N), cpu_dlogits(N * V, 0.0f);
  std::vector<float> cpu_logits = logits;
  const auto host = [](void* p, DType t) { return kernels::Operand{static_cast<std::byte*>(p), t}; };
  const std::vector<kernels::Operand> hin{host(cpu_logits.data(), DType::F32), host(targets.data(), DType::I32)};
  const std::vector<kernels::Operand> hl{host(cpu_losses.data(), DType::F32)}, hd{host(cpu_dlogits.data(), DType::F32)};
  const float cpu_loss = ops::run_cpu_op(spec, *fwd, {hin, hl, {}, {}}, 1.0f);
  const std::vector<kernels::Operand> hbwd_in{hin[0], hin[1], hl[0]};
  ops::run_cpu_op(spec, *bwd, {hbwd_in, hd, {}, {}}, 0.5f);
  EXPECT_NEAR(loss, cpu_loss, 1e-6f * cpu_loss);
  std::vector<float> got(N * V);
  std::memcpy(got.data(), st.host + dlogits_at, N * V * 4);
  testing::expect_near(got, cpu_dlogits, "dlogits");
}

}  // namespace
}  // namespace ferry::device
