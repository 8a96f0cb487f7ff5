// The CUDA device's pure pieces, on the host: Linear's cuBLASLt descriptions executed naively against the
// CPU op; each op's scratch (the planned workspace) against the arguments the dispatcher hands the kernels;
// the device AdamW's path (coefficients, element update, bf16 working copy) bitwise against CpuAdamW's. With a GPU (skipped without
// one): the CUDA device's AdamW against the host device's, and the loss reaching the host.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <variant>
#include <vector>

#include "cpu_optim/adamw.h"
#include "engine/device/cuda_device.h"
#include "engine/device/cuda_devices.h"
#include "engine/device/make_device.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/ops.h"
#include "foundation/precision.h"
#include "models/cpu_op.h"
#include "memory/convert.h"
#include "kernels/cpu/ops.h"
#include "models/registry.h"

namespace ferry::kernels::cuda {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// What cuBLASLt computes for `d` given cpu::matmul's row-major operands A and B.
void run_desc(const LtMatmulDesc& d, float* c, const float* A, const float* B, const float* bias = nullptr) {
  lt_matmul_reference(d, c, d.lt_a == LtOperand::A ? A : B, d.lt_b == LtOperand::A ? A : B, bias);
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i]))) << what << " at " << i;
}

// Linear's three matmuls and its bias epilogue, as described for cuBLASLt, equal the CPU op (forward
// overwrites; backward accumulates into what the gradients held), for both weight layouts and odd shapes.
TEST(CudaLinear, DescriptionsMatchTheCpuOp) {
  for (const bool out_in : {false, true})
    for (const auto& [rows, in, out] : {std::tuple<int64_t, int64_t, int64_t>{5, 3, 7}, {16, 8, 12}, {1, 9, 2}}) {
      const LinearShape s{rows, in, out, out_in};
      const std::vector<float> x = random_floats(rows * in, 1), w = random_floats(in * out, 2), bias = random_floats(out, 3);
      const std::vector<float> dy = random_floats(rows * out, 4), dx0 = random_floats(rows * in, 5), dw0 = random_floats(in * out, 6);
      std::vector<float> y_cpu(rows * out), y_lt(rows * out, std::numeric_limits<float>::quiet_NaN());  // beta 0 ignores C
      kernels::cpu::linear_forward(y_cpu.data(), x.data(), w.data(), bias.data(), rows, in, out, out_in);
      run_desc(linear_forward_desc(s, true), y_lt.data(), x.data(), w.data(), bias.data());
      expect_near(y_lt, y_cpu, "y");

      std::vector<float> dx_cpu = dx0, dw_cpu = dw0, db_cpu(out, 0.0f), dx_lt = dx0, dw_lt = dw0;
      kernels::cpu::linear_backward(dx_cpu.data(), dw_cpu.data(), db_cpu.data(), dy.data(), x.data(), w.data(), rows, in, out, out_in);
      run_desc(linear_dx_desc(s), dx_lt.data(), dy.data(), w.data());
      run_desc(linear_dw_desc(s), dw_lt.data(), out_in ? dy.data() : x.data(), out_in ? x.data() : dy.data());
      expect_near(dx_lt, dx_cpu, "dx");
      expect_near(dw_lt, dw_cpu, "dW");
    }
}

// Records what the dispatcher hands each kind (touches no memory).
class Recorder final : public kernels::OpKernels {
 public:
  std::vector<AttentionShape> attention;
  int64_t linear_rows = -1, linear_out = -1, ln_rows = -1, ln_channels = -1;
  int64_t embed_b = -1, embed_t = -1, embed_c = -1;
  bool computes_in(DType) const override { return true; }
  void zero(kernels::Operand, int64_t) override {}
  void embedding_forward(const kernels::EmbeddingForward&) override {}
  void embedding_backward(const kernels::EmbeddingBackward& a) override { embed_b = a.batch, embed_t = a.seq, embed_c = a.channels; }
  void layernorm_forward(const kernels::LayerNormForward&) override {}
  void layernorm_backward(const kernels::LayerNormBackward& a) override { ln_rows = a.rows, ln_channels = a.channels; }
  void linear_forward(const kernels::LinearForward&) override {}
  void linear_backward(const kernels::LinearBackward& a) override { linear_rows = a.rows, linear_out = a.out_features; }
  void attention_forward(const kernels::AttentionForward& a) override { attention.push_back(attention_shape(a.dims)); }
  void attention_backward(const kernels::AttentionBackward& a) override { attention.push_back(attention_shape(a.dims)); }
  void gelu_forward(const kernels::GeluForward&) override {}
  void gelu_backward(const kernels::GeluBackward&) override {}
  void residual_forward(const kernels::ResidualForward&) override {}
  void residual_backward(const kernels::ResidualBackward&) override {}
  void cross_entropy_forward(const kernels::CrossEntropyForward&) override {}
  void cross_entropy_backward(const kernels::CrossEntropyBackward&) override {}
};

struct FakeOperands {
  std::vector<std::byte> memory = std::vector<std::byte>(1 << 16);
  std::vector<kernels::Operand> in, out, values, grads;
  FakeOperands(const models::ModelSpec& spec, const models::OpSpec& op) {
    size_t next = 0;
    const auto fake = [&](DType dtype) { return kernels::Operand{memory.data() + (next += 1024), dtype}; };
    for (int t : op.inputs) in.push_back(fake(spec.tensors[t].dtype));
    for (int t : op.outputs) out.push_back(fake(spec.tensors[t].dtype));
    for (size_t p = 0; p < op.params.size(); ++p) values.push_back(fake(spec.precision)), grads.push_back(fake(spec.precision));
  }
  models::OpOperands operands() const { return {in, out, values, grads}; }
};

bool same(const AttentionShape& a, const AttentionShape& b) {
  return a.B == b.B && a.T == b.T && a.C == b.C && a.NH == b.NH && a.row_stride == b.row_stride && a.causal == b.causal;
}

// op_scratch_bytes reads each op's attributes as the dispatcher hands them to CudaKernels, so the planned
// workspace holds what each op asks for: checked op by op on GPT-2 (packed qkv, causal) and BERT.
TEST(CudaWorkspace, EachOpsScratchIsWhatItsKernelsAskFor) {
  for (const char* family : {"gpt2", "bert"})
    for (const DType precision : {DType::F32, DType::BF16}) {
      const models::ModelSpec spec = models::build_model({family, 2, 4, 32, 96, 16, {}, {}}, 3, 16, precision);
      for (const models::OpSpec& op : spec.ops) {
        Recorder r;
        const FakeOperands f(spec, op);
        models::dispatch_op(spec, op, f.operands(), 1.0f, r);
        AttentionShape asked{};
        DType asked_dtype = DType::I32;
        const int64_t planned = op_scratch_bytes(op, spec.precision, [&](const AttentionShape& s, DType t, models::Pass) {
          asked = s, asked_dtype = t;
          return int64_t{12345};
        });
        const bool bwd = op.pass == models::Pass::Backward;
        switch (op.kind) {
          case models::OpKind::Attention:
            ASSERT_EQ(r.attention.size(), 1u) << op.name;
            EXPECT_TRUE(same(asked, r.attention[0])) << op.name;
            EXPECT_EQ(asked.row_stride, std::string(family) == "gpt2" ? 3 * asked.C : asked.C) << op.name;
            EXPECT_EQ(asked_dtype, precision);
            EXPECT_EQ(planned, 12345);
            break;
          case models::OpKind::Linear:
            EXPECT_EQ(planned, bwd ? std::max<int64_t>(kLtWorkspaceBytes, column_sums_scratch_bytes(r.linear_rows, r.linear_out))
                                   : kLtWorkspaceBytes) << op.name;
            break;
          case models::OpKind::LayerNorm:
            EXPECT_EQ(planned, bwd ? layernorm_backward_scratch_floats(r.ln_rows, r.ln_channels) * 4 : 0) << op.name;
            break;
          case models::OpKind::Embedding:
            EXPECT_EQ(planned, bwd ? static_cast<int64_t>(embedding_backward_scratch_bytes(r.embed_b, r.embed_t, r.embed_c)) : 0) << op.name;
            if (bwd) {
              EXPECT_GT(planned, 0);
            }
            break;
          case models::OpKind::CrossEntropy: EXPECT_EQ(planned, bwd ? 4 : 0) << op.name; break;
          case models::OpKind::Gelu:
          case models::OpKind::Residual: EXPECT_EQ(planned, 0) << op.name; break;
        }
      }
    }
}

// The device's workspace holds every op's scratch and the device AdamW's over one bucket per parameter, and
// is no larger than the largest of them (256-byte aligned).
TEST(CudaWorkspace, IsTheLargestNeed) {
  const models::ModelSpec spec = models::build_model({"gpt2", 2, 4, 32, 96, 16, {}, {}}, 3, 16, DType::BF16);
  for (const int64_t attention : {int64_t{0}, int64_t{100} << 20}) {
    const AttentionScratch scratch = [attention](const AttentionShape&, DType, models::Pass) { return attention; };
    const int64_t ws = device::cuda_workspace_bytes(spec, scratch);
    int64_t most = device::device_adamw_scratch_bytes(static_cast<int64_t>(spec.params.size()));
    for (const models::OpSpec& op : spec.ops) {
      EXPECT_GE(ws, op_scratch_bytes(op, spec.precision, scratch)) << op.name;
      most = std::max(most, op_scratch_bytes(op, spec.precision, scratch));
    }
    EXPECT_EQ(ws, (most + 255) / 256 * 256);
    EXPECT_EQ(ws % 256, 0);
  }
  // The optimizer's share grows with the buckets: its statistics, one SquaresResult each.
  EXPECT_EQ(device::device_adamw_scratch_bytes(1024) - device::device_adamw_scratch_bytes(0), 16 * 1024);
  EXPECT_GE(device::device_adamw_scratch_bytes(0), static_cast<int64_t>(sum_squares_scratch_bytes(int64_t{1} << 34)));
}

// The device AdamW's coefficients with the shared per-element function give CpuAdamW's update bitwise (its
// scalar path, which every ISA path equals), the working copy rounded to bf16 as the CPU rounds its upload.
TEST(CudaAdamW, CoefficientsGiveTheCpuUpdateBitwise) {
  const cpu_optim::AdamWHyper hyper{3e-4, 0.9, 0.95, 1e-8, 0.1};
  const cpu_optim::CpuAdamW cpu({hyper, "scalar", 1});
  const size_t n = 4099;
  for (const int64_t step : {int64_t{1}, int64_t{2}, int64_t{1000}})
    for (const float grad_scale : {1.0f, 0.37f / 1024.0f}) {
      std::vector<float> p = random_floats(n, 7), m = random_floats(n, 8), v = random_floats(n, 9);
      const std::vector<float> g = random_floats(n, 10);
      for (float& x : v) x = std::fabs(x);
      std::vector<float> p2 = p, m2 = m, v2 = v;
      std::vector<uint16_t> upload(n), working(n);
      const double lr = 1.5e-4;
      cpu.step({p, m, v, g.data(), DType::F32, upload.data(), DType::BF16}, step, lr, grad_scale);
      const kernels::AdamWCoefficients c = cpu_optim::adamw_coefficients(hyper, step, lr, grad_scale, 0);
      for (size_t i = 0; i < n; ++i) {
        kernels::adamw_element(p2[i], m2[i], v2[i], g[i], c);
        working[i] = float_to_bf16(p2[i]);
      }
      ASSERT_EQ(std::memcmp(p.data(), p2.data(), n * 4), 0) << "master, step " << step;
      ASSERT_EQ(std::memcmp(m.data(), m2.data(), n * 4), 0) << "m, step " << step;
      ASSERT_EQ(std::memcmp(v.data(), v2.data(), n * 4), 0) << "v, step " << step;
      ASSERT_EQ(upload, working) << "bf16 working copy, step " << step;
    }
}


// ---- With a GPU.

#define REQUIRE_GPU() \
  if (device::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

// A host image of device memory, copied into a device's arena, run on, and copied back.
struct Staging {
  device::Device& dev;
  std::unique_ptr<memory::PinnedHostPool> pool;
  std::byte* host;
  int64_t bytes;
  Staging(device::Device& d, int64_t n) : dev(d), pool(d.make_host_pool(n)), host(pool->carve(n)), bytes(n) {
    std::memset(host, 0, static_cast<size_t>(n));  // every byte compared is one the test wrote
  }
  std::byte* at(int64_t offset) const { return dev.arena().data() + offset; }
  void up() {
    dev.copy(device::Stream::H2D, dev.arena().data(), host, bytes, "up");
    dev.wait(device::Stream::Compute, dev.record(device::Stream::H2D), "up");
  }
  void down() {
    dev.wait(device::Stream::D2H, dev.record(device::Stream::Compute), "down");
    dev.copy(device::Stream::D2H, host, dev.arena().data(), bytes, "down");
    dev.synchronize();
  }
};

struct AdamWRun {
  std::vector<std::byte> memory;
  cpu_optim::StepDecision decision;
};

// Three buckets (fp32 and bf16 gradients, a bf16 working copy) on `kind`, one AdamW step.
AdamWRun run_adamw(device::DeviceChoice::Kind kind, float max_norm, float loss_scale, bool poison) {
  const std::vector<int64_t> sizes{1000, 4099, 1};
  const std::vector<DType> grad_types{DType::F32, DType::BF16, DType::F32};
  const int64_t per = 4 * 3 + 4 + 2, region = 8192 * per;  // master, m, v, fp32-sized gradient, bf16 working copy
  const int64_t workspace = device::device_adamw_scratch_bytes(3);
  const auto dev = device::make_device({.kind = kind, .arena_bytes = 3 * region + workspace});
  Staging st(*dev, 3 * region);
  std::vector<device::Device::OptimizerBucket> buckets;
  for (size_t b = 0; b < sizes.size(); ++b) {
    const int64_t n = sizes[b], base = static_cast<int64_t>(b) * region;
    std::vector<float> master = random_floats(n, 11 + b), m = random_floats(n, 21 + b), v = random_floats(n, 31 + b);
    std::vector<float> g = random_floats(n, 41 + b);
    for (float& x : v) x = std::fabs(x);
    for (float& x : g) x *= 300.0f;  // scaled by the loss scale, as fp16 training keeps them
    if (poison && b == 1) g[17] = std::numeric_limits<float>::infinity();
    std::memcpy(st.host + base, master.data(), n * 4), std::memcpy(st.host + base + n * 4, m.data(), n * 4);
    std::memcpy(st.host + base + 2 * n * 4, v.data(), n * 4);
    memory::narrow(st.host + base + 3 * n * 4, grad_types[b], g.data(), n);
    memory::narrow(st.host + base + 4 * n * 4, DType::BF16, master.data(), n);
    auto* state = reinterpret_cast<float*>(st.at(base));
    buckets.push_back({state, state + n, state + 2 * n, st.at(base + 3 * n * 4), grad_types[b], st.at(base + 4 * n * 4), DType::BF16, n});
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
    const AdamWRun gpu = run_adamw(device::DeviceChoice::Kind::Cuda, 0.0f, 1024.0f, poison);
    const AdamWRun cpu = run_adamw(device::DeviceChoice::Kind::Host, 0.0f, 1024.0f, poison);
    EXPECT_TRUE(gpu.memory == cpu.memory) << (poison ? "skipped step" : "step");
    EXPECT_EQ(gpu.decision.report.skipped, poison);
    EXPECT_EQ(cpu.decision.report.skipped, poison);
    EXPECT_EQ(gpu.decision.grad_scale, cpu.decision.grad_scale);
    if (!poison) {
      EXPECT_NEAR(gpu.decision.report.grad_norm, cpu.decision.report.grad_norm, 1e-9 * cpu.decision.report.grad_norm);
    }
  }
  // Clipping: the norms are summed in other orders, so the scales agree to rounding.
  const AdamWRun gpu = run_adamw(device::DeviceChoice::Kind::Cuda, 1.0f, 1024.0f, false);
  const AdamWRun cpu = run_adamw(device::DeviceChoice::Kind::Host, 1.0f, 1024.0f, false);
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
  const int64_t N = fwd->attrs.rows, V = fwd->attrs.in;
  const int64_t logits_at = 0, targets_at = N * V * 4, losses_at = targets_at + N * 4, dlogits_at = losses_at + N * 4;
  const int64_t bytes = dlogits_at + N * V * 4;
  const auto dev = device::make_device({.kind = device::DeviceChoice::Kind::Cuda, .arena_bytes = bytes + 4096});
  dev->bind_workspace(dev->arena().data() + (bytes + 255) / 256 * 256, 256);
  Staging st(*dev, bytes);
  const std::vector<float> logits = random_floats(N * V, 5);
  std::vector<int32_t> targets(N);
  for (int64_t i = 0; i < N; ++i) targets[i] = i % 3 == 1 ? -100 : static_cast<int32_t>((i * 7) % V);
  std::memcpy(st.host + logits_at, logits.data(), N * V * 4), std::memcpy(st.host + targets_at, targets.data(), N * 4);
  std::memset(st.host + dlogits_at, 0, N * V * 4);
  const auto operand = [&](int64_t offset, DType t) { return kernels::Operand{st.at(offset), t}; };
  const std::vector<kernels::Operand> in{operand(logits_at, DType::F32), operand(targets_at, DType::I32)};
  const std::vector<kernels::Operand> losses{operand(losses_at, DType::F32)}, dlogits{operand(dlogits_at, DType::F32)};
  st.up();
  float loss = -1;
  dev->run_op(spec, *fwd, {in, losses, {}, {}}, 1.0f, &loss, "loss.fwd");
  dev->run_op(spec, *bwd, {in, dlogits, {}, {}}, 0.5f, nullptr, "loss.bwd");
  st.down();

  std::vector<float> cpu_losses(N), cpu_dlogits(N * V, 0.0f);
  std::vector<float> cpu_logits = logits;
  const auto host = [](void* p, DType t) { return kernels::Operand{static_cast<std::byte*>(p), t}; };
  const std::vector<kernels::Operand> hin{host(cpu_logits.data(), DType::F32), host(targets.data(), DType::I32)};
  const std::vector<kernels::Operand> hl{host(cpu_losses.data(), DType::F32)}, hd{host(cpu_dlogits.data(), DType::F32)};
  const float cpu_loss = models::run_cpu_op(spec, *fwd, {hin, hl, {}, {}}, 1.0f);
  models::run_cpu_op(spec, *bwd, {hin, hd, {}, {}}, 0.5f);
  EXPECT_NEAR(loss, cpu_loss, 1e-6f * cpu_loss);
  std::vector<float> got(N * V);
  std::memcpy(got.data(), st.host + dlogits_at, N * V * 4);
  expect_near(got, cpu_dlogits, "dlogits");
}

}  // namespace
}  // namespace ferry::kernels::cuda
