// GPT-2 ModelSpec builder: parameters in HF order, then the op list of one step (forward, loss, backward).
#include "models/gpt2.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "models/rng.h"

namespace ferry::models {
namespace {

// Appends tensors and ops to a spec; names double as documentation of the data flow.
struct Builder {
  ModelSpec& spec;

  int param(const std::string& name, Shape shape) {
    spec.params.push_back({name, std::move(shape)});
    return static_cast<int>(spec.params.size()) - 1;
  }
  int tensor(const std::string& name, Shape shape, bool is_grad = false) {
    spec.tensors.push_back({name, std::move(shape), DType::F32, is_grad, false});
    return static_cast<int>(spec.tensors.size()) - 1;
  }
  int grad_of(int t) {
    const TensorSpec& s = spec.tensors[t];
    return tensor(s.name + ".grad", s.shape, true);
  }
  int layer = -1;  // the block the next ops belong to
  void op(const std::string& name, OpKind kind, Pass pass, std::vector<int> params, std::vector<int> in,
          std::vector<int> out, OpAttrs attrs, double flops) {
    spec.ops.push_back({name, kind, pass, std::move(params), std::move(in), std::move(out), attrs, flops, layer, {}, {}});
  }
};

// The forward tensors of one block, kept for its backward.
struct Block {
  int x;                                  // block input (residual stream)
  int ln1, ln1_mean, ln1_rstd, qkv, atty, att, attproj, res;
  int ln2, ln2_mean, ln2_rstd, fch, fch_gelu, fcproj, y;  // y: block output
  int ln_1_w, ln_1_b, c_attn_w, c_attn_b, attn_proj_w, attn_proj_b;
  int ln_2_w, ln_2_b, c_fc_w, c_fc_b, mlp_proj_w, mlp_proj_b;
};

}  // namespace

ModelSpec build_gpt2(const GptConfig& cfg, int64_t B, int64_t T) {
  if (cfg.n_embd % cfg.n_head != 0) throw std::invalid_argument("gpt2: n_embd must be a multiple of n_head");
  if (T < 1 || T > cfg.seq_len) throw std::invalid_argument("gpt2: sequence length must be in [1, seq_len]");
  const int64_t C = cfg.n_embd, V = cfg.vocab_size, L = cfg.n_layer, NH = cfg.n_head, N = B * T;

  ModelSpec spec;
  spec.kind = "gpt2";
  Builder bld{spec};

  // Parameters, in the order GPT2LMHeadModel lists them (also the order of first use in forward).
  const int wte = bld.param("transformer.wte.weight", {V, C});
  const int wpe = bld.param("transformer.wpe.weight", {cfg.seq_len, C});
  std::vector<Block> blocks(L);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    Block& k = blocks[l];
    k.ln_1_w = bld.param(p + "ln_1.weight", {C});
    k.ln_1_b = bld.param(p + "ln_1.bias", {C});
    k.c_attn_w = bld.param(p + "attn.c_attn.weight", {C, 3 * C});
    k.c_attn_b = bld.param(p + "attn.c_attn.bias", {3 * C});
    k.attn_proj_w = bld.param(p + "attn.c_proj.weight", {C, C});
    k.attn_proj_b = bld.param(p + "attn.c_proj.bias", {C});
    k.ln_2_w = bld.param(p + "ln_2.weight", {C});
    k.ln_2_b = bld.param(p + "ln_2.bias", {C});
    k.c_fc_w = bld.param(p + "mlp.c_fc.weight", {C, 4 * C});
    k.c_fc_b = bld.param(p + "mlp.c_fc.bias", {4 * C});
    k.mlp_proj_w = bld.param(p + "mlp.c_proj.weight", {4 * C, C});
    k.mlp_proj_b = bld.param(p + "mlp.c_proj.bias", {C});
  }
  const int lnf_w = bld.param("transformer.ln_f.weight", {C});
  const int lnf_b = bld.param("transformer.ln_f.bias", {C});

  spec.tensors.push_back({"tokens", {B, T}, DType::I32, false, true});
  const int tokens = 0;
  spec.tensors.push_back({"targets", {B, T}, DType::I32, false, true});
  const int targets = 1;

  auto linear_attrs = [&](int64_t in, int64_t out, bool out_in) {
    OpAttrs a;
    a.rows = N, a.in = in, a.out = out, a.weight_out_in = out_in;
    return a;
  };
  auto chan_attrs = [&](int64_t channels) {
    OpAttrs a;
    a.rows = N, a.in = channels;
    return a;
  };
  OpAttrs seq_attrs;
  seq_attrs.rows = N, seq_attrs.in = C, seq_attrs.batch = B, seq_attrs.seq = T, seq_attrs.heads = NH;
  const double lin = 2.0 * N;  // FLOPs per weight element per token, forward
  const double attn_fwd = 4.0 * B * T * T * C;

  // ---- forward
  int x = bld.tensor("embed.out", {B, T, C});
  bld.op("embed.fwd", OpKind::Embedding, Pass::Forward, {wte, wpe}, {tokens}, {x}, seq_attrs, 1.0 * N * C);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    Block& k = blocks[l];
    bld.layer = static_cast<int>(l);
    k.x = x;
    k.ln1 = bld.tensor(p + "ln_1.out", {B, T, C});
    k.ln1_mean = bld.tensor(p + "ln_1.mean", {B, T});
    k.ln1_rstd = bld.tensor(p + "ln_1.rstd", {B, T});
    bld.op(p + "ln_1.fwd", OpKind::LayerNorm, Pass::Forward, {k.ln_1_w, k.ln_1_b}, {x},
           {k.ln1, k.ln1_mean, k.ln1_rstd}, chan_attrs(C), 8.0 * N * C);
    k.qkv = bld.tensor(p + "attn.c_attn.out", {B, T, 3 * C});
    bld.op(p + "attn.c_attn.fwd", OpKind::Linear, Pass::Forward, {k.c_attn_w, k.c_attn_b}, {k.ln1}, {k.qkv},
           linear_attrs(C, 3 * C, false), lin * C * 3 * C);
    k.atty = bld.tensor(p + "attn.out", {B, T, C});
    k.att = bld.tensor(p + "attn.probs", {B, NH, T, T});
    bld.op(p + "attn.fwd", OpKind::Attention, Pass::Forward, {}, {k.qkv}, {k.atty, k.att}, seq_attrs, attn_fwd);
    k.attproj = bld.tensor(p + "attn.c_proj.out", {B, T, C});
    bld.op(p + "attn.c_proj.fwd", OpKind::Linear, Pass::Forward, {k.attn_proj_w, k.attn_proj_b}, {k.atty},
           {k.attproj}, linear_attrs(C, C, false), lin * C * C);
    k.res = bld.tensor(p + "res_1.out", {B, T, C});
    bld.op(p + "res_1.fwd", OpKind::Residual, Pass::Forward, {}, {x, k.attproj}, {k.res}, chan_attrs(C), 1.0 * N * C);
    k.ln2 = bld.tensor(p + "ln_2.out", {B, T, C});
    k.ln2_mean = bld.tensor(p + "ln_2.mean", {B, T});
    k.ln2_rstd = bld.tensor(p + "ln_2.rstd", {B, T});
    bld.op(p + "ln_2.fwd", OpKind::LayerNorm, Pass::Forward, {k.ln_2_w, k.ln_2_b}, {k.res},
           {k.ln2, k.ln2_mean, k.ln2_rstd}, chan_attrs(C), 8.0 * N * C);
    k.fch = bld.tensor(p + "mlp.c_fc.out", {B, T, 4 * C});
    bld.op(p + "mlp.c_fc.fwd", OpKind::Linear, Pass::Forward, {k.c_fc_w, k.c_fc_b}, {k.ln2}, {k.fch},
           linear_attrs(C, 4 * C, false), lin * C * 4 * C);
    k.fch_gelu = bld.tensor(p + "mlp.gelu.out", {B, T, 4 * C});
    bld.op(p + "mlp.gelu.fwd", OpKind::Gelu, Pass::Forward, {}, {k.fch}, {k.fch_gelu}, chan_attrs(4 * C),
           10.0 * N * 4 * C);
    k.fcproj = bld.tensor(p + "mlp.c_proj.out", {B, T, C});
    bld.op(p + "mlp.c_proj.fwd", OpKind::Linear, Pass::Forward, {k.mlp_proj_w, k.mlp_proj_b}, {k.fch_gelu},
           {k.fcproj}, linear_attrs(4 * C, C, false), lin * 4 * C * C);
    k.y = bld.tensor(p + "res_2.out", {B, T, C});
    bld.op(p + "res_2.fwd", OpKind::Residual, Pass::Forward, {}, {k.res, k.fcproj}, {k.y}, chan_attrs(C),
           1.0 * N * C);
    x = k.y;
  }
  bld.layer = -1;
  const int lnf = bld.tensor("ln_f.out", {B, T, C});
  const int lnf_mean = bld.tensor("ln_f.mean", {B, T});
  const int lnf_rstd = bld.tensor("ln_f.rstd", {B, T});
  bld.op("ln_f.fwd", OpKind::LayerNorm, Pass::Forward, {lnf_w, lnf_b}, {x}, {lnf, lnf_mean, lnf_rstd},
         chan_attrs(C), 8.0 * N * C);
  const int logits = bld.tensor("lm_head.out", {B, T, V});
  bld.op("lm_head.fwd", OpKind::Linear, Pass::Forward, {wte}, {lnf}, {logits}, linear_attrs(C, V, true),
         lin * C * V);
  const int losses = bld.tensor("loss.out", {B, T});
  OpAttrs ce = chan_attrs(V);
  bld.op("loss.fwd", OpKind::CrossEntropy, Pass::Forward, {}, {logits, targets}, {losses}, ce, 3.0 * N * V);

  // ---- backward, in reverse
  const int dlogits = bld.grad_of(logits);
  bld.op("loss.bwd", OpKind::CrossEntropy, Pass::Backward, {}, {logits, targets}, {dlogits}, ce, 4.0 * N * V);
  const int dlnf = bld.grad_of(lnf);
  bld.op("lm_head.bwd", OpKind::Linear, Pass::Backward, {wte}, {dlogits, lnf}, {dlnf}, linear_attrs(C, V, true),
         2 * lin * C * V);
  int dx = bld.grad_of(x);
  bld.op("ln_f.bwd", OpKind::LayerNorm, Pass::Backward, {lnf_w, lnf_b}, {dlnf, x, lnf_mean, lnf_rstd}, {dx},
         chan_attrs(C), 12.0 * N * C);
  for (int64_t l = L - 1; l >= 0; --l) {
    const std::string p = "h." + std::to_string(l) + ".";
    const Block& k = blocks[l];
    bld.layer = static_cast<int>(l);
    const int dres = bld.grad_of(k.res), dfcproj = bld.grad_of(k.fcproj);
    bld.op(p + "res_2.bwd", OpKind::Residual, Pass::Backward, {}, {dx}, {dres, dfcproj}, chan_attrs(C), 2.0 * N * C);
    const int dgelu = bld.grad_of(k.fch_gelu);
    bld.op(p + "mlp.c_proj.bwd", OpKind::Linear, Pass::Backward, {k.mlp_proj_w, k.mlp_proj_b}, {dfcproj, k.fch_gelu},
           {dgelu}, linear_attrs(4 * C, C, false), 2 * lin * 4 * C * C);
    const int dfch = bld.grad_of(k.fch);
    bld.op(p + "mlp.gelu.bwd", OpKind::Gelu, Pass::Backward, {}, {dgelu, k.fch}, {dfch}, chan_attrs(4 * C),
           20.0 * N * 4 * C);
    const int dln2 = bld.grad_of(k.ln2);
    bld.op(p + "mlp.c_fc.bwd", OpKind::Linear, Pass::Backward, {k.c_fc_w, k.c_fc_b}, {dfch, k.ln2}, {dln2},
           linear_attrs(C, 4 * C, false), 2 * lin * C * 4 * C);
    bld.op(p + "ln_2.bwd", OpKind::LayerNorm, Pass::Backward, {k.ln_2_w, k.ln_2_b},
           {dln2, k.res, k.ln2_mean, k.ln2_rstd}, {dres}, chan_attrs(C), 12.0 * N * C);
    const int dxin = bld.grad_of(k.x), dattproj = bld.grad_of(k.attproj);
    bld.op(p + "res_1.bwd", OpKind::Residual, Pass::Backward, {}, {dres}, {dxin, dattproj}, chan_attrs(C),
           2.0 * N * C);
    const int datty = bld.grad_of(k.atty);
    bld.op(p + "attn.c_proj.bwd", OpKind::Linear, Pass::Backward, {k.attn_proj_w, k.attn_proj_b},
           {dattproj, k.atty}, {datty}, linear_attrs(C, C, false), 2 * lin * C * C);
    const int dqkv = bld.grad_of(k.qkv);
    bld.op(p + "attn.bwd", OpKind::Attention, Pass::Backward, {}, {datty, k.qkv, k.att}, {dqkv}, seq_attrs,
           2 * attn_fwd);
    const int dln1 = bld.grad_of(k.ln1);
    bld.op(p + "attn.c_attn.bwd", OpKind::Linear, Pass::Backward, {k.c_attn_w, k.c_attn_b}, {dqkv, k.ln1}, {dln1},
           linear_attrs(C, 3 * C, false), 2 * lin * C * 3 * C);
    bld.op(p + "ln_1.bwd", OpKind::LayerNorm, Pass::Backward, {k.ln_1_w, k.ln_1_b},
           {dln1, k.x, k.ln1_mean, k.ln1_rstd}, {dxin}, chan_attrs(C), 12.0 * N * C);
    dx = dxin;
  }
  bld.layer = -1;
  bld.op("embed.bwd", OpKind::Embedding, Pass::Backward, {wte, wpe}, {dx, tokens}, {}, seq_attrs, 2.0 * N * C);

  spec.finalize();
  return spec;
}

void init_gpt2(const ModelSpec& spec, const GptConfig& cfg, ParameterStore& store, uint64_t seed) {
  Rng rng(seed);
  const double proj_std = 0.02 / std::sqrt(2.0 * cfg.n_layer);
  for (int i = 0; i < static_cast<int>(spec.params.size()); ++i) {
    const std::string& name = spec.params[i].name;
    auto v = store.value(i);
    const bool is_bias = name.ends_with(".bias");
    const bool is_ln = name.find(".ln_") != std::string::npos;
    if (is_bias) {
      std::fill(v.begin(), v.end(), 0.0f);
    } else if (is_ln) {
      std::fill(v.begin(), v.end(), 1.0f);
    } else {
      const double std = name.ends_with("c_proj.weight") ? proj_std : 0.02;
      for (float& w : v) w = static_cast<float>(rng.normal() * std);
    }
  }
}

}  // namespace ferry::models
