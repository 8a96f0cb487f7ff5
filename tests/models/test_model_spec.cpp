// The GPT-2 ModelSpec: Hugging Face names and shapes, parameter count, and the op list's invariants
// (every read follows a write, lifetimes derived consistently, backward mirrors forward).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "models/gpt2.h"
#include "models/rng.h"

namespace ferry::models {
namespace {

TEST(Gpt2Spec, Gpt2SmallHasHuggingFaceNamesShapesAndCount) {
  const ModelSpec spec = build_gpt2({12, 12, 768, 50257, 1024}, 1, 8);
  EXPECT_EQ(spec.param_count(), 124439808);  // GPT2LMHeadModel("gpt2").num_parameters()
  EXPECT_EQ(spec.params.size(), 2u + 12u * 12u + 2u);
  EXPECT_EQ(spec.params[spec.param_index("transformer.h.3.attn.c_attn.weight")].shape, (Shape{768, 2304}));
  EXPECT_EQ(spec.params[spec.param_index("transformer.h.11.mlp.c_proj.weight")].shape, (Shape{3072, 768}));
  EXPECT_EQ(spec.params[spec.param_index("transformer.wpe.weight")].shape, (Shape{1024, 768}));
  EXPECT_THROW(spec.param_index("lm_head.weight"), std::out_of_range);  // tied to transformer.wte.weight
}

TEST(Gpt2Spec, OpListInvariantsHoldForRandomShapes) {
  Rng rng(42);
  for (int trial = 0; trial < 20; ++trial) {
    const int NH = 1 + static_cast<int>(rng.below(4));
    const GptConfig cfg{1 + static_cast<int>(rng.below(4)), NH, NH * (1 + static_cast<int>(rng.below(16))),
                        2 + static_cast<int>(rng.below(300)), 1 + static_cast<int>(rng.below(64))};
    const int64_t B = 1 + rng.below(4), T = 1 + rng.below(cfg.seq_len);
    const ModelSpec spec = build_gpt2(cfg, B, T);

    // Replay lifetimes: reads hit live tensors, each tensor is created and freed exactly once, in order.
    std::set<int> live;
    std::map<int, int> created, freed;
    for (const auto& t : spec.tensors) EXPECT_GT(numel(t.shape), 0) << t.name;
    for (int i = 0; i < static_cast<int>(spec.tensors.size()); ++i)
      if (spec.tensors[i].is_input) live.insert(i);
    for (const auto& op : spec.ops) {
      for (int t : op.creates) {
        EXPECT_EQ(created[t]++, 0) << spec.tensors[t].name;
        live.insert(t);
      }
      for (int t : op.inputs) EXPECT_TRUE(live.contains(t)) << op.name << " reads dead " << spec.tensors[t].name;
      for (int t : op.outputs) EXPECT_TRUE(live.contains(t)) << op.name << " writes dead " << spec.tensors[t].name;
      for (int t : op.frees) {
        EXPECT_EQ(freed[t]++, 0) << spec.tensors[t].name;
        live.erase(t);
      }
    }
    EXPECT_EQ(freed.size(), spec.tensors.size());

    // Every parameter is used by a forward and by a backward op; backward ops mirror forward ops in reverse.
    std::vector<int> fwd_uses(spec.params.size()), bwd_uses(spec.params.size());
    std::vector<std::string> fwd_names, bwd_names;
    for (const auto& op : spec.ops) {
      for (int p : op.params) (op.pass == Pass::Forward ? fwd_uses : bwd_uses)[p]++;
      const std::string stem = op.name.substr(0, op.name.rfind('.'));
      (op.pass == Pass::Forward ? fwd_names : bwd_names).push_back(stem);
    }
    for (size_t p = 0; p < spec.params.size(); ++p) {
      EXPECT_GT(fwd_uses[p], 0) << spec.params[p].name;
      EXPECT_EQ(fwd_uses[p], bwd_uses[p]) << spec.params[p].name;
    }
    std::reverse(bwd_names.begin(), bwd_names.end());
    EXPECT_EQ(fwd_names, bwd_names);
    EXPECT_GT(spec.step_flops(), 2.0 * spec.forward_flops());  // backward costs about twice forward
  }
}

TEST(Gpt2Spec, StepFlopsAreSixPerParameterPerTokenPlusAttention) {
  const int64_t B = 4, T = 64;
  const GptConfig cfg{12, 12, 768, 50257, 1024};
  const ModelSpec spec = build_gpt2(cfg, B, T);
  // Matmul parameters (all but embeddings' position rows, LayerNorms and biases) do 6 FLOPs per token.
  const double dense = 6.0 * B * T * (12.0 * 12 * 768 * 768 + 50257.0 * 768);
  const double attention = 12.0 * B * T * T * 768 * 12;
  EXPECT_NEAR(spec.step_flops() / (dense + attention), 1.0, 0.02);
}

TEST(Gpt2Spec, RejectsBadShapes) {
  EXPECT_THROW(build_gpt2({2, 3, 64, 256, 32}, 1, 8), std::invalid_argument);  // 64 % 3 != 0
  EXPECT_THROW(build_gpt2({2, 4, 64, 256, 32}, 1, 33), std::invalid_argument);  // T > seq_len
}

}  // namespace
}  // namespace ferry::models
