// The GPT-2, BERT and Llama ModelSpecs: Hugging Face names and shapes, parameter count, and the op list's invariants
// (every read follows a write, lifetimes derived consistently, the derived backward mirrors forward); and
// their initial weights, filled in parallel, byte for byte those of one sequential random stream.
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "models/bert.h"
#include "models/gpt2.h"
#include "models/llama.h"
#include "foundation/rng.h"
#include "models/vocab.h"
#include "models/weight_init.h"

namespace ferry::models {
namespace {

int pick(Rng& rng, int lo, int hi) { return lo + static_cast<int>(rng.below(static_cast<uint64_t>(hi - lo + 1))); }

ModelSpec random_gpt2(Rng& rng) {
  const int NH = pick(rng, 1, 4);
  const GptConfig cfg{pick(rng, 1, 4), NH, NH * pick(rng, 1, 16), pick(rng, 2, 301), pick(rng, 1, 64)};
  return build_gpt2(cfg, pick(rng, 1, 4), pick(rng, 1, cfg.seq_len));
}

ModelSpec random_bert(Rng& rng) {
  const int NH = pick(rng, 1, 4);
  const BertConfig cfg{pick(rng, 1, 4), NH, NH * pick(rng, 1, 16), pick(rng, 2, 301), pick(rng, 1, 64), pick(rng, 0, 80)};
  return build_bert(cfg, pick(rng, 1, 4), pick(rng, 1, cfg.seq_len));
}

ModelSpec random_llama(Rng& rng) {
  const int KV = pick(rng, 1, 3), NH = KV * pick(rng, 1, 3);
  LlamaConfig cfg{pick(rng, 1, 4), NH, KV, NH * 2 * pick(rng, 1, 8), pick(rng, 2, 301), pick(rng, 1, 64),
                  pick(rng, 1, 96)};
  cfg.tied = pick(rng, 0, 1) == 1, cfg.attention_bias = pick(rng, 0, 1) == 1;
  return build_llama(cfg, pick(rng, 1, 4), pick(rng, 1, cfg.seq_len));
}

// 20 specs of each model at random shapes.
std::vector<ModelSpec> random_specs() {
  Rng rng(42);
  std::vector<ModelSpec> specs;
  for (int trial = 0; trial < 20; ++trial)
    specs.push_back(random_gpt2(rng)), specs.push_back(random_bert(rng)), specs.push_back(random_llama(rng));
  return specs;
}

std::vector<std::string> names(const ModelSpec& spec, const std::vector<int>& tensors) {
  std::vector<std::string> out;
  for (int t : tensors) out.push_back(t >= 0 ? spec.tensors[t].name : "(none)");
  return out;
}

// Replays lifetimes: reads hit live tensors, each tensor is created and freed exactly once, in order.
void expect_lifetimes_consistent(const ModelSpec& spec) {
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
}

TEST(ModelSpecs, OpListInvariantsHoldForRandomShapes) {
  for (const ModelSpec& spec : random_specs()) {
    SCOPED_TRACE(spec.kind + " with " + std::to_string(spec.ops.size()) + " ops");
    expect_lifetimes_consistent(spec);
    // Every parameter is used by a forward op, and by as many backward ops.
    std::vector<int> fwd_uses(spec.params.size()), bwd_uses(spec.params.size());
    for (const auto& op : spec.ops)
      for (int p : op.params) (op.pass == Pass::Forward ? fwd_uses : bwd_uses)[p]++;
    for (size_t p = 0; p < spec.params.size(); ++p) {
      EXPECT_GT(fwd_uses[p], 0) << spec.params[p].name;
      EXPECT_EQ(fwd_uses[p], bwd_uses[p]) << spec.params[p].name;
    }
    EXPECT_GT(spec.step_flops(), 2.0 * spec.forward_flops());  // backward costs about twice forward
  }
}

// Backward FLOPs over forward, per kind: two matmuls for one (Linear), or about twice the elementwise work.
double backward_flop_ratio(OpKind kind) {
  if (kind == OpKind::LayerNorm) return 12.0 / 8.0;
  if (kind == OpKind::CrossEntropy) return 4.0 / 3.0;
  if (kind == OpKind::Rope) return 1.0;  // the rotation back
  return 2.0;
}

bool same_attrs(const OpAttrs& a, const OpAttrs& b) {
  return a.rows == b.rows && a.in == b.in && a.out == b.out && a.weight_out_in == b.weight_out_in &&
         a.batch == b.batch && a.seq == b.seq && a.heads == b.heads && a.causal == b.causal &&
         a.exact_gelu == b.exact_gelu && a.eps == b.eps && a.kv_heads == b.kv_heads && a.rope.theta == b.rope.theta &&
         a.rope.factor == b.rope.factor;
}

// The backward op of forward op `f`, as the slot conventions of models/cpu_op.cpp spell it: it reads the
// gradient of f's result (the loss has none: it is the root), f's inputs (a residual needs none), every
// output f saved beside its result, and for attention the result itself; it writes the gradients of f's inputs that are not batch inputs.
void expect_mirror(const ModelSpec& spec, const std::map<std::string, int>& index, const OpSpec& f, const OpSpec& b) {
  auto grad = [&](int t) {
    const auto it = index.find(spec.tensors[t].name + ".grad");
    if (it == index.end()) ADD_FAILURE() << f.name << ": no gradient tensor for " << spec.tensors[t].name;
    return it == index.end() ? -1 : it->second;
  };
  std::vector<int> reads, writes;
  if (f.kind != OpKind::CrossEntropy) reads.push_back(grad(f.outputs.at(0)));
  if (f.kind != OpKind::Residual && f.kind != OpKind::Rope) reads.insert(reads.end(), f.inputs.begin(), f.inputs.end());
  reads.insert(reads.end(), f.outputs.begin() + 1, f.outputs.end());
  if (f.kind == OpKind::Attention) reads.push_back(f.outputs.at(0));  // its result last: a fused backward reads it
  if (f.kind == OpKind::CrossEntropy) reads.push_back(f.outputs.at(0));  // the losses: each row's lse - its target's
  for (int t : f.inputs)
    if (!spec.tensors[t].is_input) writes.push_back(grad(t));

  ASSERT_TRUE(f.name.ends_with(".fwd")) << f.name;
  EXPECT_EQ(b.name, f.name.substr(0, f.name.size() - 4) + ".bwd");
  EXPECT_EQ(b.pass, Pass::Backward);
  EXPECT_EQ(b.kind, f.kind);
  EXPECT_EQ(b.layer, f.layer);
  EXPECT_EQ(b.params, f.params);
  EXPECT_TRUE(same_attrs(b.attrs, f.attrs));
  EXPECT_EQ(names(spec, b.inputs), names(spec, reads));
  EXPECT_EQ(names(spec, b.outputs), names(spec, writes));
  EXPECT_DOUBLE_EQ(b.flops, f.flops * backward_flop_ratio(f.kind));
}

TEST(ModelSpecs, DerivedBackwardMirrorsForwardForRandomShapes) {
  for (const ModelSpec& spec : random_specs()) {
    SCOPED_TRACE(spec.kind + " with " + std::to_string(spec.ops.size()) + " ops");
    std::map<std::string, int> index;
    for (int t = 0; t < static_cast<int>(spec.tensors.size()); ++t)
      EXPECT_TRUE(index.emplace(spec.tensors[t].name, t).second) << "two tensors named " << spec.tensors[t].name;

    // Forward ops first, then one backward op each, in exact reverse order.
    const auto first_bwd = std::find_if(spec.ops.begin(), spec.ops.end(), [](const OpSpec& op) { return op.pass == Pass::Backward; });
    const size_t n_fwd = static_cast<size_t>(first_bwd - spec.ops.begin());
    ASSERT_EQ(spec.ops.size(), 2 * n_fwd);
    for (size_t i = 0; i < n_fwd; ++i) {
      SCOPED_TRACE(spec.ops[i].name);
      EXPECT_EQ(spec.ops[i].pass, Pass::Forward);
      expect_mirror(spec, index, spec.ops[i], spec.ops[2 * n_fwd - 1 - i]);
    }

    // Gradients: "<name>.grad" of an activation, its shape, never of a batch input; forward ops touch none,
    // and every gradient is written before any op reads it.
    for (const TensorSpec& t : spec.tensors) {
      if (!t.is_grad) continue;
      const auto of = index.find(t.name.substr(0, t.name.size() - 5));
      ASSERT_TRUE(t.name.ends_with(".grad") && of != index.end()) << t.name;
      EXPECT_FALSE(spec.tensors[of->second].is_input) << t.name;
      EXPECT_EQ(spec.tensors[of->second].shape, t.shape) << t.name;
    }
    std::set<int> written;
    for (const OpSpec& op : spec.ops) {
      for (int t : op.inputs)
        EXPECT_TRUE(!spec.tensors[t].is_grad || written.contains(t)) << op.name << " reads unwritten " << spec.tensors[t].name;
      for (int t : op.outputs) {
        EXPECT_EQ(spec.tensors[t].is_grad, op.pass == Pass::Backward) << op.name << " writes " << spec.tensors[t].name;
        written.insert(t);
      }
    }
  }
}

// What the Planner is given: each tensor lives from the op that creates it to the one that frees it, every op
// that reads or writes it falls inside, and a batch input lives through the whole step (the embedding's
// backward, the last op, still reads the tokens); its bytes those of the tensor's storage class (bf16 here).
TEST(ModelSpecs, LifetimesCoverEveryUseAndBatchInputsTheWholeStep) {
  for (ModelSpec spec : random_specs()) {
    SCOPED_TRACE(spec.kind);
    spec.set_precision(DType::BF16);
    const std::vector<memory::TensorLifetime> life = spec.tensor_lifetimes();
    const int last_op = static_cast<int>(spec.ops.size()) - 1;
    for (int i = 0; i <= last_op; ++i) {
      const OpSpec& op = spec.ops[i];
      for (int t : op.creates) EXPECT_EQ(life[t].first, spec.tensors[t].is_input ? 0 : i) << spec.tensors[t].name;
      for (int t : op.frees) EXPECT_EQ(life[t].last, spec.tensors[t].is_input ? last_op : i) << spec.tensors[t].name;
      for (const auto* used : {&op.inputs, &op.outputs})
        for (int t : *used)
          EXPECT_TRUE(life[t].first <= i && i <= life[t].last) << op.name << " uses " << spec.tensors[t].name;
    }
    for (size_t t = 0; t < spec.tensors.size(); ++t) {
      EXPECT_EQ(life[t].bytes, spec.tensors[t].bytes()) << spec.tensors[t].name;
      if (spec.tensors[t].is_input) {
        EXPECT_TRUE(life[t].first == 0 && life[t].last == last_op) << spec.tensors[t].name;
      }
    }
  }
}

// Storage classes: in bf16 training the token ids stay int32 and what numerics keep in fp32 (the norms'
// statistics, the per-token losses) stays fp32; every other tensor, activations and gradients, is bf16.
TEST(ModelSpecs, StatisticsAndTokensKeepTheirTypeInAnyPrecision) {
  for (ModelSpec spec : random_specs()) {
    SCOPED_TRACE(spec.kind);
    spec.set_precision(DType::BF16);
    std::set<int> statistics;
    for (const OpSpec& op : spec.ops) {
      if (op.pass != Pass::Forward) continue;
      if (op.kind == OpKind::LayerNorm || op.kind == OpKind::RmsNorm)
        statistics.insert(op.outputs.begin() + 1, op.outputs.end());
      if (op.kind == OpKind::CrossEntropy) statistics.insert(op.outputs.at(0));
    }
    for (int t = 0; t < static_cast<int>(spec.tensors.size()); ++t) {
      const TensorSpec& x = spec.tensors[t];
      const DType want = x.is_input ? DType::I32 : statistics.contains(t) ? DType::F32 : DType::BF16;
      EXPECT_EQ(x.dtype, want) << x.name;
      EXPECT_EQ(x.bytes(), numel(x.shape) * dtype_bytes(want)) << x.name;
    }
  }
}

// The matmuls' forward FLOPs, 2 per multiply-add: a linear's x W, attention's q k^T and P v over the whole
// T x T square (a causal mask skips none of the work the kernels do). At T = 512, C = 64 attention is most of the
// step, so a factor lost there shows.
TEST(ModelSpecs, MatmulFlopsAreTwoPerMultiplyAdd) {
  const int64_t B = 2, T = 512, C = 64;
  for (const ModelSpec& spec : {build_gpt2({2, 4, C, 301, T}, B, T), build_llama({2, 4, 2, C, 301, T, 96}, B, T)}) {
    SCOPED_TRACE(spec.kind);
    int attention = 0;
    for (const OpSpec& op : spec.ops) {
      if (op.pass != Pass::Forward) continue;
      if (op.kind == OpKind::Linear) {
        EXPECT_DOUBLE_EQ(op.flops, 2.0 * B * T * op.attrs.in * op.attrs.out) << op.name;
      }
      if (op.kind == OpKind::Attention) {
        ++attention;
        EXPECT_DOUBLE_EQ(op.flops, 2.0 * 2.0 * B * T * T * C) << op.name;
      }
    }
    EXPECT_EQ(attention, 2);
  }
}

// A few backward ops spelled out, slot by slot, as models/cpu_op.cpp documents them.
// The loss's gradient is written over the logits (the loss's backward reads them last), and no other tensor is
// written in place: the planner gives the two one block.
TEST(ModelSpecs, OnlyTheLossGradientIsWrittenOverItsInput) {
  for (const ModelSpec& spec : random_specs()) {
    SCOPED_TRACE(spec.kind);
    int in_place = 0;
    for (int t = 0; t < static_cast<int>(spec.tensors.size()); ++t) {
      const int taken = spec.tensors[t].in_place_of;
      if (taken < 0) continue;
      ++in_place;
      const auto loss_bwd = std::find_if(spec.ops.begin(), spec.ops.end(), [](const OpSpec& op) {
        return op.kind == OpKind::CrossEntropy && op.pass == Pass::Backward;
      });
      ASSERT_NE(loss_bwd, spec.ops.end());
      EXPECT_EQ(loss_bwd->outputs, std::vector<int>{t});
      EXPECT_EQ(loss_bwd->inputs.at(0), taken);
      const std::vector<memory::TensorLifetime> life = spec.tensor_lifetimes();
      EXPECT_EQ(life[taken].last, life[t].first) << "the logits outlive their gradient's birth";
      EXPECT_EQ(life[t].in_place_of, taken);
    }
    EXPECT_EQ(in_place, 1);
  }
}

TEST(ModelSpecs, BackwardSlotsFollowTheCpuConventions) {
  struct Expected {
    std::string op;
    std::vector<std::string> inputs, outputs;
  };
  const std::vector<Expected> gpt2 = {
      {"loss.bwd", {"lm_head.out", "targets", "loss.out"}, {"lm_head.out.grad"}},
      {"lm_head.bwd", {"lm_head.out.grad", "ln_f.out"}, {"ln_f.out.grad"}},
      {"h.0.res_1.bwd", {"h.0.res_1.out.grad"}, {"embed.out.grad", "h.0.attn.c_proj.out.grad"}},
      {"h.0.attn.bwd",
       {"h.0.attn.out.grad", "h.0.attn.c_attn.out", "h.0.attn.probs", "h.0.attn.out"},
       {"h.0.attn.c_attn.out.grad"}},
      {"h.0.ln_1.bwd", {"h.0.ln_1.out.grad", "embed.out", "h.0.ln_1.mean", "h.0.ln_1.rstd"}, {"embed.out.grad"}},
      {"h.1.mlp.gelu.bwd", {"h.1.mlp.gelu.out.grad", "h.1.mlp.c_fc.out"}, {"h.1.mlp.c_fc.out.grad"}},
      {"embed.bwd", {"embed.out.grad", "tokens"}, {}},
  };
  const std::vector<Expected> bert = {
      {"layer.1.attn.bwd",
       {"layer.1.attn.out.grad", "layer.1.attn.q.out", "layer.1.attn.k.out", "layer.1.attn.v.out", "attention_mask",
        "layer.1.attn.probs", "layer.1.attn.out"},
       {"layer.1.attn.q.out.grad", "layer.1.attn.k.out.grad", "layer.1.attn.v.out.grad"}},
      {"layer.1.attn.res.bwd", {"layer.1.attn.res.out.grad"}, {"layer.1.attn.dense.out.grad", "layer.0.ffn.ln.out.grad"}},
      {"layer.0.attn.q.bwd", {"layer.0.attn.q.out.grad", "embed.ln.out"}, {"embed.ln.out.grad"}},
      {"embed.bwd", {"embed.out.grad", "tokens"}, {}},
  };
  const std::vector<Expected> llama = {
      {"layers.1.self_attn.bwd",
       {"layers.1.self_attn.out.grad", "layers.1.self_attn.q_rope.out", "layers.1.self_attn.k_rope.out",
        "layers.1.self_attn.v_proj.out", "layers.1.self_attn.probs", "layers.1.self_attn.out"},
       {"layers.1.self_attn.q_rope.out.grad", "layers.1.self_attn.k_rope.out.grad",
        "layers.1.self_attn.v_proj.out.grad"}},
      {"layers.0.self_attn.k_rope.bwd", {"layers.0.self_attn.k_rope.out.grad"}, {"layers.0.self_attn.k_proj.out.grad"}},
      {"layers.0.input_layernorm.bwd",
       {"layers.0.input_layernorm.out.grad", "embed.out", "layers.0.input_layernorm.rstd"},
       {"embed.out.grad"}},
      {"layers.1.mlp.act.bwd",
       {"layers.1.mlp.act.out.grad", "layers.1.mlp.gate_proj.out", "layers.1.mlp.up_proj.out"},
       {"layers.1.mlp.gate_proj.out.grad", "layers.1.mlp.up_proj.out.grad"}},
      {"embed.bwd", {"embed.out.grad", "tokens"}, {}},
  };
  const std::pair<ModelSpec, std::vector<Expected>> cases[] = {{build_gpt2({2, 2, 16, 50, 8}, 2, 8), gpt2},
                                                               {build_bert({2, 2, 16, 50, 8}, 2, 8), bert},
                                                               {build_llama({2, 4, 2, 16, 50, 8, 24}, 2, 8), llama}};
  for (const auto& [spec, expected] : cases)
    for (const Expected& e : expected) {
      const auto op = std::find_if(spec.ops.begin(), spec.ops.end(), [&](const OpSpec& o) { return o.name == e.op; });
      ASSERT_NE(op, spec.ops.end()) << e.op;
      EXPECT_EQ(names(spec, op->inputs), e.inputs) << e.op;
      EXPECT_EQ(names(spec, op->outputs), e.outputs) << e.op;
    }
}

TEST(Gpt2Spec, Gpt2SmallHasHuggingFaceNamesShapesAndCount) {
  const ModelSpec spec = build_gpt2({12, 12, 768, 50257, 1024}, 1, 8);
  EXPECT_EQ(spec.param_count(), 124439808);  // GPT2LMHeadModel("gpt2").num_parameters()
  EXPECT_EQ(spec.params.size(), 2u + 12u * 12u + 2u);
  EXPECT_EQ(spec.params[spec.param_index("transformer.h.3.attn.c_attn.weight")].shape, (Shape{768, 2304}));
  EXPECT_EQ(spec.params[spec.param_index("transformer.h.11.mlp.c_proj.weight")].shape, (Shape{3072, 768}));
  EXPECT_EQ(spec.params[spec.param_index("transformer.wpe.weight")].shape, (Shape{1024, 768}));
  EXPECT_THROW(spec.param_index("lm_head.weight"), std::out_of_range);  // tied to transformer.wte.weight
}

// The vocabulary padded inside the engine (models/vocab.h): the tables indexed by token id get padded_vocab rows
// (GPT-2's tied wte, BERT's word embeddings and decoder bias, Llama's LM head; an untied Llama embedding is only
// gathered from), the loss's softmax takes the real vocabulary of each padded row, the files' shape and the
// parameter count are the real ones; padding off (multiple 1) builds the shapes of before.
TEST(VocabPadding, TablesIndexedByTokenArePaddedInsideTheEngineOnly) {
  EXPECT_EQ(padded_vocab(50257), 50304);
  EXPECT_EQ(padded_vocab(256), 256);
  EXPECT_EQ(padded_vocab(50257, 1), 50257);
  GptConfig gpt{12, 12, 768, 50257, 1024};
  const ModelSpec padded = build_gpt2(gpt, 1, 8);
  const ParamSpec& wte = padded.params[padded.param_index("transformer.wte.weight")];
  EXPECT_EQ(wte.shape, (Shape{50304, 768}));
  EXPECT_EQ(wte.file_shape(), (Shape{50257, 768}));
  EXPECT_EQ(padded.param_count(), 124439808);
  const OpSpec& loss = *std::find_if(padded.ops.begin(), padded.ops.end(),
                                     [](const OpSpec& o) { return o.kind == OpKind::CrossEntropy; });
  EXPECT_EQ(loss.attrs.in, 50304);
  EXPECT_EQ(loss.attrs.out, 50257);
  EXPECT_EQ(padded.tensors[padded.tensor_index("lm_head.out")].shape.back(), 50304);
  gpt.vocab_multiple = 1;
  const ModelSpec unpadded = build_gpt2(gpt, 1, 8);
  EXPECT_EQ(unpadded.params[unpadded.param_index("transformer.wte.weight")].shape, (Shape{50257, 768}));
  EXPECT_EQ(unpadded.param_count(), 124439808);

  const ModelSpec bert = build_bert({2, 2, 64, 30522, 64}, 1, 8);
  EXPECT_EQ(bert.params[bert.param_index("bert.embeddings.word_embeddings.weight")].shape, (Shape{30592, 64}));
  EXPECT_EQ(bert.params[bert.param_index("cls.predictions.bias")].shape, (Shape{30592}));
  EXPECT_EQ(bert.params[bert.param_index("cls.predictions.bias")].file_shape(), (Shape{30522}));
  const ModelSpec llama = build_llama({2, 4, 2, 64, 1000, 32, 96}, 1, 8);
  EXPECT_EQ(llama.params[llama.param_index("model.embed_tokens.weight")].shape, (Shape{1000, 64}));
  EXPECT_EQ(llama.params[llama.param_index("lm_head.weight")].shape, (Shape{1024, 64}));
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

// Llama 3.1 8B and 3.2 1B: LlamaForCausalLM's names, nn.Linear's [out, in] shapes, and the counts
// LlamaForCausalLM(config).num_parameters() gives for their config.json (8030261248, 1235814400).
TEST(LlamaSpec, Llama3HasHuggingFaceNamesShapesAndCount) {
  LlamaConfig l8{32, 32, 8, 4096, 128256, 2048, 14336};
  const ModelSpec spec = build_llama(l8, 1, 8);
  EXPECT_EQ(spec.param_count(), 8030261248);
  EXPECT_EQ(spec.params.size(), 1u + 32u * 9u + 2u);
  EXPECT_EQ(spec.params[spec.param_index("model.layers.31.self_attn.k_proj.weight")].shape, (Shape{1024, 4096}));
  EXPECT_EQ(spec.params[spec.param_index("model.layers.0.mlp.down_proj.weight")].shape, (Shape{4096, 14336}));
  EXPECT_EQ(spec.params[spec.param_index("lm_head.weight")].shape, (Shape{128256, 4096}));
  EXPECT_THROW(spec.param_index("model.layers.0.self_attn.q_proj.bias"), std::out_of_range);
  LlamaConfig l1{16, 32, 8, 2048, 128256, 2048, 8192};
  l1.tied = true;
  const ModelSpec tied = build_llama(l1, 1, 8);
  EXPECT_EQ(tied.param_count(), 1235814400);
  EXPECT_THROW(tied.param_index("lm_head.weight"), std::out_of_range);  // tied to model.embed_tokens.weight
  const auto att =
      std::find_if(tied.ops.begin(), tied.ops.end(), [](const OpSpec& o) { return o.kind == OpKind::Attention; });
  EXPECT_EQ(att->attrs.heads, 32);
  EXPECT_EQ(att->attrs.kv_heads, 8);
}

TEST(LlamaSpec, Qwen2BiasesAndBadShapes) {
  LlamaConfig cfg{2, 4, 2, 32, 64, 16, 48};
  cfg.attention_bias = true;
  const ModelSpec spec = build_llama(cfg, 1, 8);
  EXPECT_EQ(spec.params[spec.param_index("model.layers.1.self_attn.v_proj.bias")].shape, (Shape{16}));
  EXPECT_THROW(spec.param_index("model.layers.1.self_attn.o_proj.bias"), std::out_of_range);  // Qwen2's o_proj has none
  EXPECT_THROW(build_llama({2, 4, 3, 32, 64, 16, 48}, 1, 8), std::invalid_argument);          // 3 kv heads for 4 heads
  EXPECT_THROW(build_llama({2, 4, 2, 36, 64, 16, 48}, 1, 8), std::invalid_argument);          // head size 9: odd
  EXPECT_THROW(build_llama({2, 4, 2, 32, 64, 16, 48}, 1, 17), std::invalid_argument);         // T > seq_len
}

TEST(BertSpec, BertBaseHasHuggingFaceNamesShapesAndCount) {
  const ModelSpec spec = build_bert({12, 12, 768, 30522, 512}, 1, 8);
  EXPECT_EQ(spec.param_count(), 109514298);  // BertForMaskedLM("bert-base-uncased").num_parameters()
  EXPECT_EQ(spec.params[spec.param_index("bert.encoder.layer.11.intermediate.dense.weight")].shape, (Shape{3072, 768}));
  EXPECT_THROW(build_bert({2, 3, 64, 256, 32}, 1, 8), std::invalid_argument);  // 64 % 3 != 0
}

// The initialisations as one sequential walk over the parameters with one Rng, as they were written before
// they ran in parallel: the reference the parallel fill must match byte for byte.
// A padded vocabulary's rows (models/vocab.h) draw nothing from the stream and stay zero.
using Values = std::vector<std::vector<float>>;

std::span<float> real(std::vector<float>& v, const ParamSpec& p) {
  return std::span<float>(v).first(static_cast<size_t>(numel(p.file_shape())));
}

Values sequential_gpt2(const ModelSpec& spec, const GptConfig& cfg, uint64_t seed) {
  Rng rng(seed);
  const double proj_std = 0.02 / std::sqrt(2.0 * cfg.n_layer);
  Values out;
  for (const ParamSpec& p : spec.params) {
    std::vector<float>& v = out.emplace_back(static_cast<size_t>(numel(p.shape)));
    if (p.name.ends_with(".bias")) std::fill(v.begin(), v.end(), 0.0f);
    else if (p.name.find(".ln_") != std::string::npos) std::fill(v.begin(), v.end(), 1.0f);
    else
      for (float& w : real(v, p))
        w = static_cast<float>(rng.normal() * (p.name.ends_with("c_proj.weight") ? proj_std : 0.02));
  }
  return out;
}

Values sequential_bert(const ModelSpec& spec, uint64_t seed) {
  Rng rng(seed);
  Values out;
  for (const ParamSpec& p : spec.params) {
    std::vector<float>& v = out.emplace_back(static_cast<size_t>(numel(p.shape)));
    if (p.name.find("LayerNorm.weight") != std::string::npos) std::fill(v.begin(), v.end(), 1.0f);
    else if (p.name.ends_with(".bias")) std::fill(v.begin(), v.end(), 0.0f);
    else
      for (float& w : real(v, p)) w = static_cast<float>(rng.normal() * 0.02);
  }
  return out;
}

// Runs `init` into fresh buffers (NaN-filled, so an element left unwritten shows) on at most `threads`.
template <class Init>
Values parallel_init(const ModelSpec& spec, int threads, Init init) {
  const tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
  Values out;
  std::vector<std::span<float>> views;
  for (const ParamSpec& p : spec.params) views.emplace_back(out.emplace_back(static_cast<size_t>(numel(p.shape)), NAN));
  init(std::span<const std::span<float>>(views));
  return out;
}

void expect_same_bytes(const ModelSpec& spec, const Values& expected, const Values& got, const std::string& what) {
  ASSERT_EQ(expected.size(), got.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(expected[i].size(), got[i].size());
    EXPECT_EQ(std::memcmp(expected[i].data(), got[i].data(), expected[i].size() * sizeof(float)), 0)
        << what << ": " << spec.params[i].name << " differs from the sequential stream";
  }
}

// Padded or not, every real element starts with the same value; the padded rows start at zero.
TEST(VocabPadding, PaddingChangesNoInitialValue) {
  for (const int64_t V : {int64_t{301}, int64_t{3001}}) {
    GptConfig off{2, 2, 64, static_cast<int>(V), 32};
    off.vocab_multiple = 1;
    GptConfig on = off;
    on.vocab_multiple = kVocabMultiple;
    const ModelSpec a = build_gpt2(off, 1, 1), b = build_gpt2(on, 1, 1);
    const Values want = parallel_init(a, 2, [&](auto views) { init_gpt2(a, off, views, 4); });
    const Values got = parallel_init(b, 2, [&](auto views) { init_gpt2(b, on, views, 4); });
    ASSERT_EQ(got[0].size(), static_cast<size_t>(padded_vocab(V) * 64));
    EXPECT_EQ(std::memcmp(got[0].data(), want[0].data(), want[0].size() * sizeof(float)), 0) << "wte, V " << V;
    EXPECT_TRUE(std::all_of(got[0].begin() + static_cast<std::ptrdiff_t>(want[0].size()), got[0].end(),
                            [](float x) { return std::bit_cast<uint32_t>(x) == 0; }))
        << "a padded row of wte is not zero, V " << V;
    for (size_t i = 1; i < want.size(); ++i)
      EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), want[i].size() * sizeof(float)), 0) << a.params[i].name;
  }
}

TEST(WeightInit, DiscardSkipsExactlyThatManyDraws) {
  Rng pick_n(3);
  for (int trial = 0; trial < 50; ++trial) {
    const uint64_t seed = pick_n.next_u64(), n = pick_n.below(5000);
    Rng skipped(seed), walked(seed);
    skipped.discard(n);
    for (uint64_t i = 0; i < n; ++i) walked.next_u64();
    EXPECT_EQ(skipped.next_u64(), walked.next_u64()) << "seed " << seed << ", n " << n;
  }
}

// Shapes whose embeddings span several of the fill's chunks (65536 elements), and the random small ones.
TEST(WeightInit, Gpt2MatchesOneSequentialStreamOnAnyThreadCount) {
  Rng rng(5);
  std::vector<GptConfig> configs{{2, 2, 64, 3001, 128}, {3, 4, 96, 1500, 700}};
  for (int trial = 0; trial < 10; ++trial) {
    const int NH = pick(rng, 1, 4);
    configs.push_back({pick(rng, 1, 4), NH, NH * pick(rng, 1, 16), pick(rng, 2, 301), pick(rng, 1, 64)});
  }
  for (const GptConfig& cfg : configs)
    for (const uint64_t seed : {uint64_t{1}, uint64_t{0xFFFFFFFFFFFFFFF0ull}}) {
      const ModelSpec spec = build_gpt2(cfg, 1, 1);
      const Values expected = sequential_gpt2(spec, cfg, seed);
      for (const int threads : {1, 4}) {
        const Values got = parallel_init(spec, threads, [&](auto views) { init_gpt2(spec, cfg, views, seed); });
        expect_same_bytes(spec, expected, got, "gpt2 C " + std::to_string(cfg.n_embd) + ", seed " + std::to_string(seed) +
                                                   ", " + std::to_string(threads) + " threads");
      }
    }
}

TEST(WeightInit, BertMatchesOneSequentialStreamOnAnyThreadCount) {
  Rng rng(6);
  std::vector<BertConfig> configs{{2, 2, 64, 3001, 128, 0}, {3, 4, 96, 1500, 700, 80}};
  for (int trial = 0; trial < 10; ++trial) {
    const int NH = pick(rng, 1, 4);
    configs.push_back({pick(rng, 1, 4), NH, NH * pick(rng, 1, 16), pick(rng, 2, 301), pick(rng, 1, 64), pick(rng, 0, 80)});
  }
  for (const BertConfig& cfg : configs)
    for (const uint64_t seed : {uint64_t{1}, uint64_t{0xFFFFFFFFFFFFFFF0ull}}) {
      const ModelSpec spec = build_bert(cfg, 1, 1);
      const Values expected = sequential_bert(spec, seed);
      for (const int threads : {1, 4}) {
        const Values got = parallel_init(spec, threads, [&](auto views) { init_bert(spec, views, seed); });
        expect_same_bytes(spec, expected, got, "bert C " + std::to_string(cfg.n_embd) + ", seed " + std::to_string(seed) +
                                                   ", " + std::to_string(threads) + " threads");
      }
    }
}

// Hugging Face's Llama initialisation: weights N(0, 0.02) from one stream, biases 0, RMSNorm gains 1.
TEST(WeightInit, LlamaMatchesOneSequentialStreamOnAnyThreadCount) {
  LlamaConfig cfg{2, 4, 2, 64, 3001, 128, 96};
  cfg.attention_bias = true;
  const ModelSpec spec = build_llama(cfg, 1, 1);
  Rng rng(9);
  Values expected;
  for (const ParamSpec& p : spec.params) {
    std::vector<float>& v = expected.emplace_back(static_cast<size_t>(numel(p.shape)));
    if (p.name.ends_with(".bias")) std::fill(v.begin(), v.end(), 0.0f);
    else if (p.name.ends_with("norm.weight")) std::fill(v.begin(), v.end(), 1.0f);
    else
      for (float& w : real(v, p)) w = static_cast<float>(rng.normal() * 0.02);
  }
  for (const int threads : {1, 4})
    expect_same_bytes(spec, expected, parallel_init(spec, threads, [&](auto views) { init_llama(spec, views, 9); }),
                      "llama, " + std::to_string(threads) + " threads");
}

// A part of the model initialised alone (empty views for the rest: a device-tier bucket through a staging
// buffer) gets the values the whole model's initialisation gives it, and nothing else is written.
TEST(WeightInit, APartInitialisedAloneGetsTheWholeModelsValues) {
  const GptConfig gpt{2, 2, 64, 3001, 128};
  LlamaConfig llama{2, 4, 2, 64, 301, 32, 96};
  llama.attention_bias = true;
  const std::vector<std::pair<ModelSpec, std::function<void(std::span<const std::span<float>>)>>> models = [&] {
    std::vector<std::pair<ModelSpec, std::function<void(std::span<const std::span<float>>)>>> m;
    const ModelSpec g = build_gpt2(gpt, 1, 1), b = build_bert({2, 2, 64, 301, 32, 2}, 1, 1),
                    l = build_llama(llama, 1, 1);
    m.emplace_back(g, [g, gpt](auto views) { init_gpt2(g, gpt, views, 3); });
    m.emplace_back(b, [b](auto views) { init_bert(b, views, 3); });
    m.emplace_back(l, [l](auto views) { init_llama(l, views, 3); });
    return m;
  }();
  for (const auto& [spec, init] : models) {
    const Values whole = parallel_init(spec, 2, init);
    const size_t n = spec.params.size();
    for (const size_t stride : {size_t{2}, size_t{3}, n})  // every other one, every third, the first alone
      for (size_t first = 0; first < std::min(stride, n); ++first) {
        Values part;
        std::vector<std::span<float>> views(n);
        for (size_t i = 0; i < n; ++i) {
          part.emplace_back(static_cast<size_t>(numel(spec.params[i].shape)), NAN);
          if (i % stride == first) views[i] = part.back();
        }
        init(views);
        for (size_t i = 0; i < n; ++i) {
          const bool chosen = i % stride == first;
          EXPECT_EQ(std::memcmp(part[i].data(), whole[i].data(), part[i].size() * sizeof(float)) == 0, chosen)
              << spec.kind << ": " << spec.params[i].name
              << (chosen ? " differs from the whole model's" : " was written");
        }
      }
  }
}

// Any elements of a parameter filled alone (a parameter the device alone keeps goes there a few MiB at a time) are
// the whole model's values: ranges that start and end inside the fill's chunks of 65536 elements and across them.
TEST(WeightInit, AnyRangeOfAParameterAloneGetsTheWholeModelsValues) {
  const GptConfig gpt{2, 2, 64, 3001, 128};
  LlamaConfig llama{2, 4, 2, 64, 3001, 32, 96};
  llama.attention_bias = true;
  const ModelSpec g = build_gpt2(gpt, 1, 1), b = build_bert({2, 2, 64, 3001, 32, 2}, 1, 1),
                  l = build_llama(llama, 1, 1);
  using Init = std::function<void(std::span<const std::span<float>>)>;
  const std::vector<std::tuple<const ModelSpec*, std::vector<InitRule>, Init>> models{
      {&g, gpt2_init_rules(g, gpt), [&](auto views) { init_gpt2(g, gpt, views, 3); }},
      {&b, bert_init_rules(b), [&](auto views) { init_bert(b, views, 3); }},
      {&l, llama_init_rules(l), [&](auto views) { init_llama(l, views, 3); }}};
  Rng rng(4);
  for (const auto& [spec, rules, init] : models) {
    const Values whole = parallel_init(*spec, 2, init);
    // Over the real elements: a padded vocabulary's rows draw nothing and are zero (VocabPadding.*).
    const std::vector<int64_t> real = real_numels(*spec);
    const InitialValues initial(rules, real, 3);
    for (size_t p = 0; p < whole.size(); ++p) {
      const int64_t n = real[p];
      std::vector<std::pair<int64_t, int64_t>> ranges{{0, n}, {n - 1, n}};
      if (n > 2 * 65536) ranges.emplace_back(65535, 2 * 65536 + 1);
      for (int i = 0; i < 3; ++i) {
        const int64_t begin = static_cast<int64_t>(rng.below(static_cast<uint64_t>(n)));
        ranges.emplace_back(begin, begin + static_cast<int64_t>(rng.below(static_cast<uint64_t>(n - begin + 1))));
      }
      for (const auto& [begin, end] : ranges) {
        std::vector<float> got(static_cast<size_t>(end - begin), NAN);
        initial.fill(static_cast<int>(p), begin, got);
        EXPECT_EQ(std::memcmp(got.data(), whole[p].data() + begin, got.size() * sizeof(float)), 0)
            << spec->kind << ": " << spec->params[p].name << " [" << begin << ", " << end << ")";
      }
      std::vector<float> past_the_end(2);
      EXPECT_THROW(initial.fill(static_cast<int>(p), n - 1, past_the_end), std::out_of_range);
    }
  }
}

// fill_real_range, how the trainer fills a parameter a chunk at a time: the whole model's values over the real
// elements, zeros past them, for chunks inside the real rows, across their end and inside the padding.
TEST(VocabPadding, ARangeOfAPaddedTableIsTheModelsValuesThenZeros) {
  GptConfig cfg{2, 2, 64, 301, 32};
  const ModelSpec spec = build_gpt2(cfg, 1, 1);
  const int wte = spec.param_index("transformer.wte.weight");
  const Values whole = parallel_init(spec, 2, [&](auto views) { init_gpt2(spec, cfg, views, 4); });
  const std::vector<int64_t> real = real_numels(spec);
  const InitialValues initial(gpt2_init_rules(spec, cfg), real, 4);
  const int64_t n_real = real[wte], n = numel(spec.params[wte].shape);
  ASSERT_GT(n, n_real);
  for (const auto& [begin, end] : std::vector<std::pair<int64_t, int64_t>>{
           {0, n_real}, {n_real - 100, n_real + 100}, {n_real - 1, n}, {n_real, n}, {n_real + 7, n}, {0, n}}) {
    std::vector<float> got(static_cast<size_t>(end - begin), NAN);
    fill_real_range(initial, real, wte, begin, got);
    EXPECT_EQ(std::memcmp(got.data(), whole[wte].data() + begin, got.size() * sizeof(float)), 0)
        << "[" << begin << ", " << end << ") of " << n_real << " real elements";
  }
}

}  // namespace
}  // namespace ferry::models
