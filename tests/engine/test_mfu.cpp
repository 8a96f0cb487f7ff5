// The MFU arithmetic of `ferry-bench step` and `ferry-bench offload` (bench/mfu.h), on the host: the FLOP
// count of GPT-2 124M written out by hand, the count against the op-level FLOPs of the model's own op list,
// the peak each GPU name and precision divides by, and the roofline per op kind (bench/roofline.h).
#include <gtest/gtest.h>

#include "bench/mfu.h"
#include "bench/roofline.h"
#include "models/gpt2.h"

namespace ferry::bench {
namespace {

models::ModelSpec gpt2(int n_layer, int n_head, int n_embd, int64_t B, int64_t T) {
  return models::build_gpt2({n_layer, n_head, n_embd, 50257, 1024}, B, T);
}

// GPT-2 124M at 16 x 1024: N = 124,439,808 (wte 50257*768, wpe 1024*768, 12 blocks of 7,087,872, ln_f);
// 6*N*16384 + 12*12*768*1024*16384 = 14,088,356,757,504; one block's recomputation
// (2*7,087,872 + 4*768*1024)*16384 = 283,794,997,248.
TEST(Mfu, Gpt2SmallStepFlopsWrittenOut) {
  const models::ModelSpec spec = gpt2(12, 12, 768, 16, 1024);
  const FlopShape s = flop_shape(spec, 12, 768, 1024, 16 * 1024, 0);
  EXPECT_EQ(s.params, 124439808);
  EXPECT_EQ(s.block_params, 7087872);  // 12*C^2 + 13*C
  EXPECT_EQ(step_flops(s).model, 14088356757504.0);
  EXPECT_EQ(step_flops(s).recompute, 0.0);
  EXPECT_EQ(step_flops(flop_shape(spec, 12, 768, 1024, 16 * 1024, 1)).recompute, 283794997248.0);
  EXPECT_EQ(step_flops(flop_shape(spec, 12, 768, 1024, 16 * 1024, 12)).model, 14088356757504.0) << "recomputation is not model FLOPs";
}

// The formula against the op list's own FLOPs (models/builder.cpp counts each matmul as 2*rows*in*out and
// attention as 4*B*T*T*C forward): within 3% over shapes, the difference being the position table and the
// biases and LayerNorm weights (in N, not in matmuls) against the elementwise ops (in the op list, not in N).
TEST(Mfu, FormulaAgreesWithTheOpListsFlops) {
  struct Shape {
    int n_layer, n_head, n_embd;
    int64_t B, T;
  };
  for (const Shape& sh : {Shape{12, 12, 768, 4, 1024}, Shape{24, 16, 1024, 2, 512}, Shape{4, 4, 256, 8, 128}}) {
    const models::ModelSpec spec = gpt2(sh.n_layer, sh.n_head, sh.n_embd, sh.B, sh.T);
    const StepFlops f = step_flops(flop_shape(spec, sh.n_layer, sh.n_embd, sh.T, sh.B * sh.T, 1));
    EXPECT_NEAR(f.model / spec.step_flops(), 1.0, 0.03) << sh.n_layer << " layers, n_embd " << sh.n_embd;
    double block0_forward = 0;
    for (const models::OpSpec& op : spec.ops)
      if (op.layer == 0 && op.pass == models::Pass::Forward) block0_forward += op.flops;
    EXPECT_NEAR(f.recompute / block0_forward, 1.0, 0.03) << sh.n_layer << " layers, n_embd " << sh.n_embd;
  }
}

TEST(Mfu, PeakRateByGpuAndPrecision) {
  EXPECT_EQ(peak_rate("NVIDIA H100 80GB HBM3", DType::BF16)->flops, 989e12);
  EXPECT_EQ(peak_rate("NVIDIA H100 80GB HBM3", DType::BF16)->name, "H100 SXM bf16 dense (tensor cores)");
  EXPECT_EQ(peak_rate("NVIDIA H200", DType::F16)->flops, 989e12);
  EXPECT_EQ(peak_rate("NVIDIA H200", DType::F32)->flops, 67e12);
  EXPECT_EQ(peak_rate("NVIDIA H100 PCIe", DType::BF16)->flops, 756e12);
  EXPECT_FALSE(peak_rate("NVIDIA A100-SXM4-80GB", DType::BF16).has_value()) << "no figure is invented for another GPU";
  // 50% MFU: half the peak's FLOPs in a second.
  EXPECT_DOUBLE_EQ(mfu({989e12 / 2, 0}, 1.0, *peak_rate("NVIDIA H200", DType::BF16)), 0.5);
}

// The forward matmuls' bytes written out for two GPT-2 124M blocks at 16 x 1024 in bf16: each block's c_attn
// (C -> 3C), attention's c_proj (C -> C), c_fc (C -> 4C) and the MLP's c_proj (4C -> C) read their input, weight
// and bias and write their output; the LM head reads x and the tied wte (Vp x C, the padded vocabulary), no bias,
// and writes the logits.
// Each of these is compute-bound on an H100 at this shape (c_attn, the closest: 58 GFLOP = 59 us against 104 MB
// = 31 us), so the row's roofline is its FLOPs at the peak; LayerNorm's is its bytes at the bandwidth.
TEST(Roofline, LinearBytesWrittenOutAndEachRowOnItsBound) {
  // The LM head's rows are the vocabulary padded inside the engine (50257 -> 50304, models/vocab.h).
  const int64_t L = 2, C = 768, V = models::padded_vocab(50257), B = 16, T = 1024, BT = B * T;
  models::ModelSpec spec = gpt2(L, 12, C, B, T);
  spec.set_precision(DType::BF16);
  const PeakRate h100 = *peak_rate("H100 SXM", DType::BF16);
  const std::vector<OpKindTime> rows = sum_by_kind(spec, {}, h100);
  auto row = [&](const std::string& kind, const std::string& pass) {
    for (const OpKindTime& r : rows)
      if (r.kind == kind && r.pass == pass) return r;
    ADD_FAILURE() << "no row " << kind << " " << pass;
    return OpKindTime{};
  };
  auto linear = [&](int64_t in, int64_t out) { return 2.0 * double(BT * in + in * out + out + BT * out); };
  const double block = linear(C, 3 * C) + linear(C, C) + linear(C, 4 * C) + linear(4 * C, C);
  const OpKindTime fwd = row("linear", "forward");
  EXPECT_EQ(fwd.ops, 4 * L + 1);
  EXPECT_DOUBLE_EQ(fwd.bytes, double(L) * block + 2.0 * double(BT * C + V * C + BT * V));
  EXPECT_STREQ(roofline_bound(fwd, h100), "compute");
  EXPECT_DOUBLE_EQ(fwd.roofline_s, fwd.flops / h100.flops);
  const OpKindTime ln = row("layernorm", "forward");
  EXPECT_STREQ(roofline_bound(ln, h100), "memory");
  EXPECT_NEAR(ln.roofline_s, ln.bytes / h100.bytes_per_s, 1e-15);
  double flops = 0, roofline = 0;
  for (const OpKindTime& r : rows) flops += r.flops, roofline += r.roofline_s;
  EXPECT_DOUBLE_EQ(flops, spec.step_flops());
  EXPECT_GT(roofline, spec.step_flops() / h100.flops) << "memory-bound ops add to the FLOPs' time";
  // Without a peak no roofline is invented; measured times order the rows.
  std::vector<double> measured(spec.ops.size(), 0.0);
  measured.back() = 1.0;
  const std::vector<OpKindTime> timed = sum_by_kind(spec, measured, std::nullopt);
  EXPECT_EQ(timed.front().seconds, 1.0);
  for (const OpKindTime& r : timed) EXPECT_EQ(r.roofline_s, 0.0);
}

}  // namespace
}  // namespace ferry::bench
