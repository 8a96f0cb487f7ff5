// The workspace a model's ops take on the CUDA device, on the host: each op's scratch (the planned workspace)
// against the arguments the dispatcher hands CudaKernels, and the device's whole workspace the largest need
// (built only with CUDA).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/device/cuda_device.h"
#include "engine/ops/op_dispatch.h"
#include "engine/ops/op_workspace.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/ops.h"
#include "models/registry.h"

namespace ferry::ops {
namespace {

using namespace kernels::cuda;

// Records what the dispatcher hands each kind (touches no memory).
class Recorder final : public kernels::OpKernels {
 public:
  std::vector<AttentionShape> attention;
  int64_t linear_rows = -1, linear_out = -1, ln_rows = -1, ln_channels = -1, rms_rows = -1, rms_channels = -1;
  int64_t embed_b = -1, embed_t = -1, embed_c = -1;
  bool computes_in(DType) const override { return true; }
  void zero(kernels::Operand, int64_t) override {}
  void embedding_forward(const kernels::EmbeddingForward&) override {}
  void embedding_backward(const kernels::EmbeddingBackward& a) override {
    embed_b = a.batch, embed_t = a.seq, embed_c = a.channels;
  }
  void layernorm_forward(const kernels::LayerNormForward&) override {}
  void layernorm_backward(const kernels::LayerNormBackward& a) override { ln_rows = a.rows, ln_channels = a.channels; }
  void linear_forward(const kernels::LinearForward&) override {}
  void linear_backward(const kernels::LinearBackward& a) override { linear_rows = a.rows, linear_out = a.out_features; }
  void attention_forward(const kernels::AttentionForward& a) override { attention.push_back(attention_shape(a.dims)); }
  void attention_backward(const kernels::AttentionBackward& a) override {
    attention.push_back(attention_shape(a.dims));
  }
  void gelu_forward(const kernels::GeluForward&) override {}
  void gelu_backward(const kernels::GeluBackward&) override {}
  void rmsnorm_forward(const kernels::RmsNormForward&) override {}
  void rmsnorm_backward(const kernels::RmsNormBackward& a) override { rms_rows = a.rows, rms_channels = a.channels; }
  void rope_forward(const kernels::RopeForward&) override {}
  void rope_backward(const kernels::RopeBackward&) override {}
  void swiglu_forward(const kernels::SwiGluForward&) override {}
  void swiglu_backward(const kernels::SwiGluBackward&) override {}
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
    for (size_t p = 0; p < op.params.size(); ++p)
      values.push_back(fake(spec.precision)), grads.push_back(fake(spec.precision));
  }
  OpOperands operands() const { return {in, out, values, grads}; }
};

bool same(const AttentionShape& a, const AttentionShape& b) {
  return a.B == b.B && a.T == b.T && a.C == b.C && a.NH == b.NH && a.row_stride == b.row_stride &&
         a.causal == b.causal && a.kv_heads == b.kv_heads && a.kv_row_stride == b.kv_row_stride;
}

// op_scratch_bytes reads each op's attributes as the dispatcher hands them to CudaKernels, so the planned
// workspace holds what each op asks for: checked op by op on GPT-2 (packed qkv, causal), BERT and Llama
// (grouped-query attention: 2 kv heads for 4 query heads).
TEST(CudaWorkspace, EachOpsScratchIsWhatItsKernelsAskFor) {
  for (const char* family : {"gpt2", "bert", "llama"})
    for (const DType precision : {DType::F32, DType::BF16}) {
      models::ModelConfig config{family, 2, 4, 32, 96, 16, {}, {}};
      if (std::string(family) == "llama") config.n_kv_head = 2;
      const models::ModelSpec spec = models::build_model(config, 3, 16, precision);
      for (const models::OpSpec& op : spec.ops) {
        Recorder r;
        const FakeOperands f(spec, op);
        dispatch_op(spec, op, f.operands(), 1.0f, r);
        AttentionShape asked{};
        DType asked_dtype = DType::I32;
        const int64_t planned =
            op_scratch_bytes(op, spec.precision, [&](const AttentionShape& s, DType t, models::Pass) {
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
            EXPECT_EQ(planned,
                      bwd ? std::max<int64_t>(kLtWorkspaceBytes, column_sums_scratch_bytes(r.linear_rows, r.linear_out))
                          : kLtWorkspaceBytes)
                << op.name;
            break;
          case models::OpKind::LayerNorm:
            EXPECT_EQ(planned, bwd ? layernorm_backward_scratch_floats(r.ln_rows, r.ln_channels) * 4 : 0) << op.name;
            break;
          case models::OpKind::Embedding:
            EXPECT_EQ(planned,
                      bwd ? static_cast<int64_t>(embedding_backward_scratch_bytes(r.embed_b, r.embed_t, r.embed_c)) : 0)
                << op.name;
            if (bwd) {
              EXPECT_GT(planned, 0);
            }
            break;
          case models::OpKind::CrossEntropy: EXPECT_EQ(planned, bwd ? 4 : 0) << op.name; break;
          case models::OpKind::RmsNorm:
            EXPECT_EQ(planned, bwd ? rmsnorm_backward_scratch_floats(r.rms_rows, r.rms_channels) * 4 : 0) << op.name;
            break;
          case models::OpKind::Rope:
          case models::OpKind::SwiGlu:
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
    const int64_t ws = cuda_workspace_bytes(spec, scratch);
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

}  // namespace
}  // namespace ferry::ops
