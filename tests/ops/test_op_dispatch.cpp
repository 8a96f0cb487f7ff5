// dispatch_op: a recording OpKernels sees each op's slots handed to the right argument (q, k, v as views of
// GPT-2's packed qkv), created gradients zeroed first, and operands of the wrong dtype refused, naming the op.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <variant>
#include <vector>

#include "engine/ops/op_dispatch.h"
#include "models/registry.h"

namespace ferry::ops {
namespace {

using namespace kernels;  // the argument structs a backend receives
using namespace models;

using Args = std::variant<std::monostate, EmbeddingForward, EmbeddingBackward, LayerNormForward, LayerNormBackward,
                          LinearForward, LinearBackward, AttentionForward, AttentionBackward, GeluForward, GeluBackward,
                          ResidualForward, ResidualBackward, CrossEntropyForward, CrossEntropyBackward, RmsNormForward,
                          RmsNormBackward, RopeForward, RopeBackward, SwiGluForward, SwiGluBackward>;

// Keeps the arguments of the last call; touches no memory.
class Recorder final : public OpKernels {
 public:
  explicit Recorder(bool only_fp32 = false) : only_fp32_(only_fp32) {}
  Args last;
  std::vector<std::pair<Operand, int64_t>> zeroed;

  bool computes_in(DType compute) const override { return !only_fp32_ || compute == DType::F32; }
  void zero(Operand t, int64_t bytes) override { zeroed.emplace_back(t, bytes); }
  void embedding_forward(const EmbeddingForward& a) override { last = a; }
  void embedding_backward(const EmbeddingBackward& a) override { last = a; }
  void layernorm_forward(const LayerNormForward& a) override { last = a; }
  void layernorm_backward(const LayerNormBackward& a) override { last = a; }
  void linear_forward(const LinearForward& a) override { last = a; }
  void linear_backward(const LinearBackward& a) override { last = a; }
  void attention_forward(const AttentionForward& a) override { last = a; }
  void attention_backward(const AttentionBackward& a) override { last = a; }
  void gelu_forward(const GeluForward& a) override { last = a; }
  void gelu_backward(const GeluBackward& a) override { last = a; }
  void rmsnorm_forward(const RmsNormForward& a) override { last = a; }
  void rmsnorm_backward(const RmsNormBackward& a) override { last = a; }
  void rope_forward(const RopeForward& a) override { last = a; }
  void rope_backward(const RopeBackward& a) override { last = a; }
  void swiglu_forward(const SwiGluForward& a) override { last = a; }
  void swiglu_backward(const SwiGluBackward& a) override { last = a; }
  void residual_forward(const ResidualForward& a) override { last = a; }
  void residual_backward(const ResidualBackward& a) override { last = a; }
  void cross_entropy_forward(const CrossEntropyForward& a) override { *a.loss = 1.25f, last = a; }
  void cross_entropy_backward(const CrossEntropyBackward& a) override { last = a; }

 private:
  bool only_fp32_;
};

// Distinct fake addresses for every operand of one op (never dereferenced), typed as the spec stores them.
struct FakeOperands {
  std::vector<std::byte> memory = std::vector<std::byte>(1 << 16);
  std::vector<Operand> in, out, values, grads;

  FakeOperands(const ModelSpec& spec, const OpSpec& op) {
    size_t next = 0;
    const auto fake = [&](DType dtype) { return Operand{memory.data() + (next += 1024), dtype}; };
    for (int t : op.inputs) in.push_back(fake(spec.tensors[t].dtype));
    for (int t : op.outputs) out.push_back(fake(spec.tensors[t].dtype));
    for (size_t p = 0; p < op.params.size(); ++p) values.push_back(fake(spec.precision)), grads.push_back(fake(spec.precision));
  }
  OpOperands operands() const { return {in, out, values, grads}; }
};

bool same(Operand a, Operand b) { return a.data == b.data && a.dtype == b.dtype; }
Operand shifted(Operand o, int64_t elements) { return {o.data + elements * dtype_bytes(o.dtype), o.dtype}; }

const OpSpec& op_named(const ModelSpec& spec, const std::string& name) {
  for (const OpSpec& op : spec.ops)
    if (op.name == name) return op;
  throw std::out_of_range(name);
}

struct Dispatch : ::testing::Test {
  ModelSpec gpt = build_model({"gpt2", 2, 4, 32, 96, 16, {}}, 2, 16, DType::BF16);
  ModelSpec bert = build_model({"bert", 2, 4, 32, 96, 16, {}}, 2, 16, DType::BF16);
  Recorder kernels;

  // Dispatches the op on fake operands; returns them (for the test to compare slots with).
  FakeOperands run(const ModelSpec& spec, const std::string& name, float* loss = nullptr) {
    FakeOperands o(spec, op_named(spec, name));
    const float l = dispatch_op(spec, op_named(spec, name), o.operands(), 0.5f, kernels);
    if (loss) *loss = l;
    return o;
  }
};

TEST_F(Dispatch, LayerNormSlots) {
  const FakeOperands f = run(gpt, "h.0.ln_1.fwd");  // [x] -> [y, mean, rstd], params [w, b]
  const auto& fwd = std::get<LayerNormForward>(kernels.last);
  EXPECT_TRUE(same(fwd.out, f.out[0]) && same(fwd.mean, f.out[1]) && same(fwd.rstd, f.out[2]) && same(fwd.x, f.in[0]));
  EXPECT_TRUE(same(fwd.w, f.values[0]) && same(fwd.b, f.values[1]));
  EXPECT_EQ(fwd.rows, 32);
  EXPECT_EQ(fwd.channels, 32);
  EXPECT_EQ(fwd.eps, 1e-5f);
  const FakeOperands b = run(gpt, "h.0.ln_1.bwd");  // [dy, x, mean, rstd] -> [dx]
  const auto& bwd = std::get<LayerNormBackward>(kernels.last);
  EXPECT_TRUE(same(bwd.dx, b.out[0]) && same(bwd.dw, b.grads[0]) && same(bwd.db, b.grads[1]) && same(bwd.dout, b.in[0]));
  EXPECT_TRUE(same(bwd.x, b.in[1]) && same(bwd.w, b.values[0]) && same(bwd.mean, b.in[2]) && same(bwd.rstd, b.in[3]));
  EXPECT_EQ(std::get<LayerNormForward>((run(bert, "embed.ln.fwd"), kernels.last)).eps, 1e-12f);
}

TEST_F(Dispatch, LinearSlotsWithAndWithoutBias) {
  const FakeOperands f = run(gpt, "h.1.mlp.c_fc.fwd");
  const auto& fwd = std::get<LinearForward>(kernels.last);
  EXPECT_TRUE(same(fwd.out, f.out[0]) && same(fwd.x, f.in[0]) && same(fwd.w, f.values[0]) && same(fwd.bias, f.values[1]));
  EXPECT_EQ(fwd.in, 32);
  EXPECT_EQ(fwd.out_features, 128);
  EXPECT_FALSE(fwd.weight_out_in);
  const FakeOperands b = run(gpt, "lm_head.bwd");  // tied, no bias: [dy, x] -> [dx], params [wte]
  const auto& bwd = std::get<LinearBackward>(kernels.last);
  EXPECT_TRUE(same(bwd.dx, b.out[0]) && same(bwd.dw, b.grads[0]) && same(bwd.dout, b.in[0]) && same(bwd.x, b.in[1]));
  EXPECT_TRUE(same(bwd.w, b.values[0]));
  EXPECT_EQ(bwd.dbias.data, nullptr);
  EXPECT_TRUE(bwd.weight_out_in);
  EXPECT_EQ(bwd.out_features, 128);  // the vocabulary of 96 padded inside the engine (models/vocab.h)
}

TEST_F(Dispatch, EmbeddingSlots) {
  const FakeOperands f = run(bert, "embed.fwd");  // [tokens] -> [x], params [word, pos, type]
  const auto& fwd = std::get<EmbeddingForward>(kernels.last);
  EXPECT_TRUE(same(fwd.out, f.out[0]) && same(fwd.tokens, f.in[0]) && same(fwd.wte, f.values[0]));
  EXPECT_TRUE(same(fwd.wpe, f.values[1]) && same(fwd.type, f.values[2]));
  const FakeOperands b = run(gpt, "embed.bwd");  // [dx, tokens] -> [], params [wte, wpe]
  const auto& bwd = std::get<EmbeddingBackward>(kernels.last);
  EXPECT_TRUE(same(bwd.dwte, b.grads[0]) && same(bwd.dwpe, b.grads[1]) && same(bwd.dout, b.in[0]) && same(bwd.tokens, b.in[1]));
  EXPECT_EQ(bwd.dtype.data, nullptr);  // GPT-2 has no token types
  EXPECT_EQ(bwd.batch * bwd.seq, 32);
}

TEST_F(Dispatch, Gpt2AttentionSplitsPackedQkv) {
  const int64_t C = 32;
  const FakeOperands f = run(gpt, "h.0.attn.fwd");  // [qkv] -> [y, probs]
  const auto& fwd = std::get<AttentionForward>(kernels.last);
  EXPECT_TRUE(same(fwd.out, f.out[0]) && same(fwd.probs, f.out[1]) && same(fwd.q, f.in[0]));
  EXPECT_TRUE(same(fwd.k, shifted(f.in[0], C)) && same(fwd.v, shifted(f.in[0], 2 * C)));
  EXPECT_EQ(fwd.key_mask.data, nullptr);
  EXPECT_EQ(fwd.dims.row_stride, 3 * C);
  EXPECT_TRUE(fwd.dims.causal);
  const FakeOperands b = run(gpt, "h.0.attn.bwd");  // [dy, qkv, probs, y] -> [dqkv]
  const auto& bwd = std::get<AttentionBackward>(kernels.last);
  EXPECT_TRUE(same(bwd.dq, b.out[0]) && same(bwd.dk, shifted(b.out[0], C)) && same(bwd.dv, shifted(b.out[0], 2 * C)));
  EXPECT_TRUE(same(bwd.dout, b.in[0]) && same(bwd.q, b.in[1]) && same(bwd.v, shifted(b.in[1], 2 * C)));
  EXPECT_TRUE(same(bwd.probs, b.in[2]) && same(bwd.y, b.in[3]));
  EXPECT_EQ(bwd.dims.heads, 4);
}

TEST_F(Dispatch, BertAttentionTakesThreeTensorsAndTheMask) {
  const FakeOperands f = run(bert, "layer.1.attn.fwd");  // [q, k, v, mask] -> [y, probs]
  const auto& fwd = std::get<AttentionForward>(kernels.last);
  EXPECT_TRUE(same(fwd.q, f.in[0]) && same(fwd.k, f.in[1]) && same(fwd.v, f.in[2]) && same(fwd.key_mask, f.in[3]));
  EXPECT_EQ(fwd.key_mask.dtype, DType::I32);
  EXPECT_EQ(fwd.dims.row_stride, 32);
  EXPECT_FALSE(fwd.dims.causal);
  const FakeOperands b = run(bert, "layer.1.attn.bwd");  // [dy, q, k, v, mask, probs, y] -> [dq, dk, dv]
  const auto& bwd = std::get<AttentionBackward>(kernels.last);
  EXPECT_TRUE(same(bwd.dq, b.out[0]) && same(bwd.dk, b.out[1]) && same(bwd.dv, b.out[2]) && same(bwd.dout, b.in[0]));
  EXPECT_TRUE(same(bwd.q, b.in[1]) && same(bwd.k, b.in[2]) && same(bwd.v, b.in[3]) && same(bwd.key_mask, b.in[4]));
  EXPECT_TRUE(same(bwd.probs, b.in[5]) && same(bwd.y, b.in[6]));
}

TEST_F(Dispatch, GeluAndResidualSlots) {
  const FakeOperands g = run(bert, "head.gelu.bwd");  // [dy, x] -> [dx]
  const auto& gelu = std::get<GeluBackward>(kernels.last);
  EXPECT_TRUE(same(gelu.dx, g.out[0]) && same(gelu.dout, g.in[0]) && same(gelu.x, g.in[1]));
  EXPECT_TRUE(gelu.exact);
  EXPECT_FALSE(std::get<GeluForward>((run(gpt, "h.0.mlp.gelu.fwd"), kernels.last)).exact);
  const FakeOperands r = run(gpt, "h.1.res_2.bwd");  // [dy] -> [da, db]
  const auto& res = std::get<ResidualBackward>(kernels.last);
  EXPECT_TRUE(same(res.da, r.out[0]) && same(res.db, r.out[1]) && same(res.dout, r.in[0]));
  EXPECT_EQ(res.n, 32 * 32);
  const FakeOperands rf = run(gpt, "h.1.res_1.fwd");  // [a, b] -> [y]
  const auto& add = std::get<ResidualForward>(kernels.last);
  EXPECT_TRUE(same(add.out, rf.out[0]) && same(add.a, rf.in[0]) && same(add.b, rf.in[1]));
}

TEST_F(Dispatch, CrossEntropyReturnsTheLossAndPassesTheWeight) {
  float loss = 0;
  const FakeOperands f = run(bert, "loss.fwd", &loss);  // [logits, targets] -> [losses]
  const auto& fwd = std::get<CrossEntropyForward>(kernels.last);
  EXPECT_TRUE(same(fwd.losses, f.out[0]) && same(fwd.logits, f.in[0]) && same(fwd.targets, f.in[1]));
  EXPECT_EQ(fwd.losses.dtype, DType::F32);  // fixed: the per-token losses stay fp32
  EXPECT_EQ(loss, 1.25f);
  EXPECT_EQ(fwd.vocab, 96);
  EXPECT_EQ(fwd.stride, 128);
  const FakeOperands b = run(bert, "loss.bwd");  // [logits, targets, losses] -> [dlogits]
  const auto& bwd = std::get<CrossEntropyBackward>(kernels.last);
  EXPECT_TRUE(same(bwd.dlogits, b.out[0]) && same(bwd.logits, b.in[0]) && same(bwd.targets, b.in[1]) &&
              same(bwd.losses, b.in[2]));
  EXPECT_EQ(bwd.loss_weight, 0.5f);
  EXPECT_EQ(bwd.rows, 32);
  EXPECT_EQ(bwd.vocab, 96);  // the softmax's classes; the logits' rows are the vocabulary padded (models/vocab.h)
  EXPECT_EQ(bwd.stride, 128);
}

// The loss's backward produces dlogits first: it writes them (not zeroed, not read); h.0.ln_1's backward adds
// into the gradient of block 0's input, which res_1's backward began; h.1.res_2's backward begins both of its.
TEST_F(Dispatch, GradientsAreWrittenWhereFirstProducedAndAccumulatedWhereTheyAddUp) {
  const auto decoded = [&](const std::string& name) {
    const FakeOperands f(gpt, op_named(gpt, name));
    return decode_op(gpt, op_named(gpt, name), f.operands(), 1.0f);
  };
  const auto output = [](const kernels::OpCall& call, const OpSpec& op, size_t k) {
    return call.operands[op.inputs.size() + k];
  };
  run(gpt, "loss.bwd");
  EXPECT_TRUE(kernels.zeroed.empty());
  EXPECT_FALSE(std::get<CrossEntropyBackward>(kernels.last).accumulate);
  EXPECT_FALSE(output(decoded("loss.bwd"), op_named(gpt, "loss.bwd"), 0).read);
  run(gpt, "h.1.res_2.bwd");
  EXPECT_FALSE(std::get<ResidualBackward>(kernels.last).accumulate);
  run(gpt, "h.0.ln_1.bwd");
  EXPECT_TRUE(std::get<LayerNormBackward>(kernels.last).accumulate);
  EXPECT_TRUE(output(decoded("h.0.ln_1.bwd"), op_named(gpt, "h.0.ln_1.bwd"), 0).read);
  EXPECT_TRUE(kernels.zeroed.empty());
  run(gpt, "h.0.ln_1.fwd");
  EXPECT_TRUE(kernels.zeroed.empty());
}

// An op that adds into one gradient another op began and creates the other accumulates into both, the one it
// creates zeroed first (in its storage's bytes).
TEST_F(Dispatch, AnOpThatCreatesOnlySomeOfItsGradientsZeroesThoseAndAccumulates) {
  OpSpec& res = *std::ranges::find(gpt.ops, std::string("h.1.res_2.bwd"), &OpSpec::name);  // [dy] -> [da, db]
  ASSERT_EQ(res.creates.size(), 2u);
  const int begun_elsewhere = res.outputs[0];
  std::erase(res.creates, begun_elsewhere);
  const FakeOperands f = run(gpt, "h.1.res_2.bwd");
  EXPECT_TRUE(std::get<ResidualBackward>(kernels.last).accumulate);
  ASSERT_EQ(kernels.zeroed.size(), 1u);
  EXPECT_TRUE(same(kernels.zeroed[0].first, f.out[1]));
  EXPECT_EQ(kernels.zeroed[0].second, 32 * 32 * 2);  // (B*T, C) in bf16
}

// Runs `op` of the BERT spec with one operand's dtype changed; returns the error ("" when accepted).
std::string error_with(const ModelSpec& spec, const std::string& op_name, std::vector<Operand> FakeOperands::*list,
                       size_t k, DType dtype, Recorder& kernels) {
  FakeOperands f(spec, op_named(spec, op_name));
  (f.*list)[k].dtype = dtype;
  try {
    dispatch_op(spec, op_named(spec, op_name), f.operands(), 1.0f, kernels);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST_F(Dispatch, RefusesUnknownDtypeCombinationsNamingTheOp) {
  const auto refused = [&](std::vector<Operand> FakeOperands::*list, size_t k, DType dtype, const std::string& op) {
    const std::string e = error_with(bert, op, list, k, dtype, kernels);
    EXPECT_NE(e.find("op " + op), std::string::npos) << op << " operand " << k << " as " << to_string(dtype) << ": '" << e << "'";
  };
  refused(&FakeOperands::values, 0, DType::F16, "embed.ln.fwd");  // an fp16 weight among bf16 operands
  refused(&FakeOperands::in, 0, DType::F32, "embed.fwd");         // token ids as floats
  refused(&FakeOperands::out, 1, DType::BF16, "embed.ln.fwd");    // LayerNorm's mean rounded to bf16
  refused(&FakeOperands::in, 3, DType::BF16, "layer.0.attn.fwd"); // the key mask as floats
  refused(&FakeOperands::grads, 1, DType::F32, "head.dense.bwd"); // an fp32 gradient among bf16 operands
  refused(&FakeOperands::out, 0, DType::I32, "head.gelu.fwd");    // an activation as int32
  EXPECT_EQ(error_with(bert, "embed.ln.fwd", &FakeOperands::grads, 0, DType::F32, kernels), "")
      << "forward does not read gradients";
  // A backend that computes only in fp32 refuses a bf16 op, by name.
  Recorder fp32_only(true);
  EXPECT_NE(error_with(bert, "head.gelu.fwd", &FakeOperands::in, 0, DType::BF16, fp32_only).find("op head.gelu.fwd"),
            std::string::npos);
}

}  // namespace
}  // namespace ferry::ops
