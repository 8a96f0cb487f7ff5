// BERT ModelSpec builder: parameters in BertForMaskedLM's order, then the op list of one step (forward,
// masked-LM loss, backward in reverse).
#include "models/bert.h"

#include <stdexcept>
#include <string>

#include "models/rng.h"

namespace ferry::models {
namespace {

struct Builder {
  ModelSpec& spec;
  int layer = -1;  // the block the next ops belong to

  int param(const std::string& name, Shape shape) {
    spec.params.push_back({name, std::move(shape)});
    return static_cast<int>(spec.params.size()) - 1;
  }
  int tensor(const std::string& name, Shape shape) {
    spec.tensors.push_back({name, std::move(shape), DType::F32, false, false});
    return static_cast<int>(spec.tensors.size()) - 1;
  }
  int grad_of(int t) {
    const TensorSpec s = spec.tensors[t];
    spec.tensors.push_back({s.name + ".grad", s.shape, DType::F32, true, false});
    return static_cast<int>(spec.tensors.size()) - 1;
  }
  void op(const std::string& name, OpKind kind, Pass pass, std::vector<int> params, std::vector<int> in,
          std::vector<int> out, OpAttrs attrs, double flops) {
    spec.ops.push_back({name, kind, pass, std::move(params), std::move(in), std::move(out), attrs, flops, layer, {}, {}});
  }
};

// A LayerNorm's parameters and saved tensors.
struct Norm {
  int w, b, out, mean, rstd;
};

struct Block {
  int x;  // block input
  int q_w, q_b, k_w, k_b, v_w, v_b, ao_w, ao_b, i_w, i_b, o_w, o_b;
  int q, k, v, ctx, probs, ao, r1, h, g, f, r2;
  Norm ln1, ln2;  // attention.output.LayerNorm, output.LayerNorm
};

}  // namespace

ModelSpec build_bert(const BertConfig& cfg, int64_t B, int64_t T) {
  if (cfg.n_embd % cfg.n_head != 0) throw std::invalid_argument("bert: n_embd must be a multiple of n_head");
  if (T < 1 || T > cfg.seq_len) throw std::invalid_argument("bert: sequence length must be in [1, seq_len]");
  const int64_t C = cfg.n_embd, V = cfg.vocab_size, L = cfg.n_layer, NH = cfg.n_head, N = B * T, F = cfg.ffn();

  ModelSpec spec;
  spec.kind = "bert";
  Builder bld{spec};
  auto norm_params = [&](const std::string& prefix) {
    Norm n{};
    n.w = bld.param(prefix + "LayerNorm.weight", {C});
    n.b = bld.param(prefix + "LayerNorm.bias", {C});
    return n;
  };

  // Parameters, in BertForMaskedLM's order.
  const int word = bld.param("bert.embeddings.word_embeddings.weight", {V, C});
  const int pos = bld.param("bert.embeddings.position_embeddings.weight", {cfg.seq_len, C});
  const int type = bld.param("bert.embeddings.token_type_embeddings.weight", {2, C});
  Norm emb_ln = norm_params("bert.embeddings.");
  std::vector<Block> blocks(L);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "bert.encoder.layer." + std::to_string(l) + ".";
    Block& k = blocks[l];
    k.q_w = bld.param(p + "attention.self.query.weight", {C, C});
    k.q_b = bld.param(p + "attention.self.query.bias", {C});
    k.k_w = bld.param(p + "attention.self.key.weight", {C, C});
    k.k_b = bld.param(p + "attention.self.key.bias", {C});
    k.v_w = bld.param(p + "attention.self.value.weight", {C, C});
    k.v_b = bld.param(p + "attention.self.value.bias", {C});
    k.ao_w = bld.param(p + "attention.output.dense.weight", {C, C});
    k.ao_b = bld.param(p + "attention.output.dense.bias", {C});
    k.ln1 = norm_params(p + "attention.output.");
    k.i_w = bld.param(p + "intermediate.dense.weight", {F, C});
    k.i_b = bld.param(p + "intermediate.dense.bias", {F});
    k.o_w = bld.param(p + "output.dense.weight", {C, F});
    k.o_b = bld.param(p + "output.dense.bias", {C});
    k.ln2 = norm_params(p + "output.");
  }
  const int mlm_bias = bld.param("cls.predictions.bias", {V});
  const int t_w = bld.param("cls.predictions.transform.dense.weight", {C, C});
  const int t_b = bld.param("cls.predictions.transform.dense.bias", {C});
  Norm head_ln = norm_params("cls.predictions.transform.");

  spec.tensors.push_back({"tokens", {B, T}, DType::I32, false, true});
  spec.tensors.push_back({"targets", {B, T}, DType::I32, false, true});
  spec.tensors.push_back({"attention_mask", {B, T}, DType::I32, false, true});
  const int tokens = 0, targets = 1, mask = 2;

  auto linear_attrs = [&](int64_t in, int64_t out) {
    OpAttrs a;
    a.rows = N, a.in = in, a.out = out, a.weight_out_in = true;  // nn.Linear: [out, in]
    return a;
  };
  auto chan_attrs = [&](int64_t channels) {
    OpAttrs a;
    a.rows = N, a.in = channels;
    return a;
  };
  OpAttrs ln_attrs = chan_attrs(C);
  ln_attrs.eps = 1e-12f;
  OpAttrs gelu_attrs = chan_attrs(F);
  gelu_attrs.exact_gelu = true;
  OpAttrs head_gelu = chan_attrs(C);
  head_gelu.exact_gelu = true;
  OpAttrs seq_attrs;
  seq_attrs.rows = N, seq_attrs.in = C, seq_attrs.batch = B, seq_attrs.seq = T, seq_attrs.heads = NH;
  seq_attrs.causal = false;
  const double lin = 2.0 * N;
  const double attn_fwd = 4.0 * B * T * T * C;
  auto layernorm = [&](const std::string& name, Norm& n, int x) {
    n.out = bld.tensor(name + ".out", {B, T, C});
    n.mean = bld.tensor(name + ".mean", {B, T});
    n.rstd = bld.tensor(name + ".rstd", {B, T});
    bld.op(name + ".fwd", OpKind::LayerNorm, Pass::Forward, {n.w, n.b}, {x}, {n.out, n.mean, n.rstd}, ln_attrs, 8.0 * N * C);
    return n.out;
  };
  auto layernorm_bwd = [&](const std::string& name, const Norm& n, int dout, int x, int dx) {
    bld.op(name + ".bwd", OpKind::LayerNorm, Pass::Backward, {n.w, n.b}, {dout, x, n.mean, n.rstd}, {dx}, ln_attrs, 12.0 * N * C);
  };

  // ---- forward
  const int emb = bld.tensor("embed.out", {B, T, C});
  bld.op("embed.fwd", OpKind::Embedding, Pass::Forward, {word, pos, type}, {tokens}, {emb}, seq_attrs, 2.0 * N * C);
  int x = layernorm("embed.ln", emb_ln, emb);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "layer." + std::to_string(l) + ".";
    Block& k = blocks[l];
    bld.layer = static_cast<int>(l);
    k.x = x;
    k.q = bld.tensor(p + "attn.q.out", {B, T, C});
    bld.op(p + "attn.q.fwd", OpKind::Linear, Pass::Forward, {k.q_w, k.q_b}, {x}, {k.q}, linear_attrs(C, C), lin * C * C);
    k.k = bld.tensor(p + "attn.k.out", {B, T, C});
    bld.op(p + "attn.k.fwd", OpKind::Linear, Pass::Forward, {k.k_w, k.k_b}, {x}, {k.k}, linear_attrs(C, C), lin * C * C);
    k.v = bld.tensor(p + "attn.v.out", {B, T, C});
    bld.op(p + "attn.v.fwd", OpKind::Linear, Pass::Forward, {k.v_w, k.v_b}, {x}, {k.v}, linear_attrs(C, C), lin * C * C);
    k.ctx = bld.tensor(p + "attn.out", {B, T, C});
    k.probs = bld.tensor(p + "attn.probs", {B, NH, T, T});
    bld.op(p + "attn.fwd", OpKind::Attention, Pass::Forward, {}, {k.q, k.k, k.v, mask}, {k.ctx, k.probs}, seq_attrs, attn_fwd);
    k.ao = bld.tensor(p + "attn.dense.out", {B, T, C});
    bld.op(p + "attn.dense.fwd", OpKind::Linear, Pass::Forward, {k.ao_w, k.ao_b}, {k.ctx}, {k.ao}, linear_attrs(C, C), lin * C * C);
    k.r1 = bld.tensor(p + "attn.res.out", {B, T, C});
    bld.op(p + "attn.res.fwd", OpKind::Residual, Pass::Forward, {}, {k.ao, x}, {k.r1}, chan_attrs(C), 1.0 * N * C);
    const int x1 = layernorm(p + "attn.ln", k.ln1, k.r1);
    k.h = bld.tensor(p + "ffn.in.out", {B, T, F});
    bld.op(p + "ffn.in.fwd", OpKind::Linear, Pass::Forward, {k.i_w, k.i_b}, {x1}, {k.h}, linear_attrs(C, F), lin * C * F);
    k.g = bld.tensor(p + "ffn.gelu.out", {B, T, F});
    bld.op(p + "ffn.gelu.fwd", OpKind::Gelu, Pass::Forward, {}, {k.h}, {k.g}, gelu_attrs, 10.0 * N * F);
    k.f = bld.tensor(p + "ffn.out.out", {B, T, C});
    bld.op(p + "ffn.out.fwd", OpKind::Linear, Pass::Forward, {k.o_w, k.o_b}, {k.g}, {k.f}, linear_attrs(F, C), lin * F * C);
    k.r2 = bld.tensor(p + "ffn.res.out", {B, T, C});
    bld.op(p + "ffn.res.fwd", OpKind::Residual, Pass::Forward, {}, {k.f, x1}, {k.r2}, chan_attrs(C), 1.0 * N * C);
    x = layernorm(p + "ffn.ln", k.ln2, k.r2);
  }
  bld.layer = -1;
  const int th = bld.tensor("head.dense.out", {B, T, C});
  bld.op("head.dense.fwd", OpKind::Linear, Pass::Forward, {t_w, t_b}, {x}, {th}, linear_attrs(C, C), lin * C * C);
  const int tg = bld.tensor("head.gelu.out", {B, T, C});
  bld.op("head.gelu.fwd", OpKind::Gelu, Pass::Forward, {}, {th}, {tg}, head_gelu, 10.0 * N * C);
  const int tl = layernorm("head.ln", head_ln, tg);
  const int logits = bld.tensor("head.decoder.out", {B, T, V});
  bld.op("head.decoder.fwd", OpKind::Linear, Pass::Forward, {word, mlm_bias}, {tl}, {logits}, linear_attrs(C, V), lin * C * V);
  const int losses = bld.tensor("loss.out", {B, T});
  const OpAttrs ce = chan_attrs(V);
  bld.op("loss.fwd", OpKind::CrossEntropy, Pass::Forward, {}, {logits, targets}, {losses}, ce, 3.0 * N * V);

  // ---- backward, in reverse
  const int dlogits = bld.grad_of(logits);
  bld.op("loss.bwd", OpKind::CrossEntropy, Pass::Backward, {}, {logits, targets}, {dlogits}, ce, 4.0 * N * V);
  const int dtl = bld.grad_of(tl);
  bld.op("head.decoder.bwd", OpKind::Linear, Pass::Backward, {word, mlm_bias}, {dlogits, tl}, {dtl}, linear_attrs(C, V), 2 * lin * C * V);
  const int dtg = bld.grad_of(tg);
  layernorm_bwd("head.ln", head_ln, dtl, tg, dtg);
  const int dth = bld.grad_of(th);
  bld.op("head.gelu.bwd", OpKind::Gelu, Pass::Backward, {}, {dtg, th}, {dth}, head_gelu, 20.0 * N * C);
  int dx = bld.grad_of(x);
  bld.op("head.dense.bwd", OpKind::Linear, Pass::Backward, {t_w, t_b}, {dth, x}, {dx}, linear_attrs(C, C), 2 * lin * C * C);
  for (int64_t l = L - 1; l >= 0; --l) {
    const std::string p = "layer." + std::to_string(l) + ".";
    const Block& k = blocks[l];
    bld.layer = static_cast<int>(l);
    const int dr2 = bld.grad_of(k.r2);
    layernorm_bwd(p + "ffn.ln", k.ln2, dx, k.r2, dr2);
    const int df = bld.grad_of(k.f), dx1 = bld.grad_of(k.ln1.out);
    bld.op(p + "ffn.res.bwd", OpKind::Residual, Pass::Backward, {}, {dr2}, {df, dx1}, chan_attrs(C), 2.0 * N * C);
    const int dg = bld.grad_of(k.g);
    bld.op(p + "ffn.out.bwd", OpKind::Linear, Pass::Backward, {k.o_w, k.o_b}, {df, k.g}, {dg}, linear_attrs(F, C), 2 * lin * F * C);
    const int dh = bld.grad_of(k.h);
    bld.op(p + "ffn.gelu.bwd", OpKind::Gelu, Pass::Backward, {}, {dg, k.h}, {dh}, gelu_attrs, 20.0 * N * F);
    bld.op(p + "ffn.in.bwd", OpKind::Linear, Pass::Backward, {k.i_w, k.i_b}, {dh, k.ln1.out}, {dx1}, linear_attrs(C, F), 2 * lin * C * F);
    const int dr1 = bld.grad_of(k.r1);
    layernorm_bwd(p + "attn.ln", k.ln1, dx1, k.r1, dr1);
    const int dao = bld.grad_of(k.ao), dxin = bld.grad_of(k.x);
    bld.op(p + "attn.res.bwd", OpKind::Residual, Pass::Backward, {}, {dr1}, {dao, dxin}, chan_attrs(C), 2.0 * N * C);
    const int dctx = bld.grad_of(k.ctx);
    bld.op(p + "attn.dense.bwd", OpKind::Linear, Pass::Backward, {k.ao_w, k.ao_b}, {dao, k.ctx}, {dctx}, linear_attrs(C, C), 2 * lin * C * C);
    const int dq = bld.grad_of(k.q), dk = bld.grad_of(k.k), dv = bld.grad_of(k.v);
    bld.op(p + "attn.bwd", OpKind::Attention, Pass::Backward, {}, {dctx, k.q, k.k, k.v, k.probs, mask}, {dq, dk, dv}, seq_attrs, 2 * attn_fwd);
    bld.op(p + "attn.v.bwd", OpKind::Linear, Pass::Backward, {k.v_w, k.v_b}, {dv, k.x}, {dxin}, linear_attrs(C, C), 2 * lin * C * C);
    bld.op(p + "attn.k.bwd", OpKind::Linear, Pass::Backward, {k.k_w, k.k_b}, {dk, k.x}, {dxin}, linear_attrs(C, C), 2 * lin * C * C);
    bld.op(p + "attn.q.bwd", OpKind::Linear, Pass::Backward, {k.q_w, k.q_b}, {dq, k.x}, {dxin}, linear_attrs(C, C), 2 * lin * C * C);
    dx = dxin;
  }
  bld.layer = -1;
  const int demb = bld.grad_of(emb);
  layernorm_bwd("embed.ln", emb_ln, dx, emb, demb);
  bld.op("embed.bwd", OpKind::Embedding, Pass::Backward, {word, pos, type}, {demb, tokens}, {}, seq_attrs, 3.0 * N * C);

  spec.finalize();
  return spec;
}

void init_bert(const ModelSpec& spec, ParameterStore& store, uint64_t seed) {
  Rng rng(seed);
  for (int i = 0; i < static_cast<int>(spec.params.size()); ++i) {
    const std::string& name = spec.params[i].name;
    auto v = store.value(i);
    if (name.find("LayerNorm.weight") != std::string::npos) std::fill(v.begin(), v.end(), 1.0f);
    else if (name.ends_with(".bias")) std::fill(v.begin(), v.end(), 0.0f);
    else for (float& w : v) w = static_cast<float>(rng.normal() * 0.02);
  }
}

}  // namespace ferry::models
