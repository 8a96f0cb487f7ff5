// Builder: the tensors, shapes, attributes and forward FLOPs of each op kind, so model files state only the graph.
#include "models/builder.h"

#include <stdexcept>

#include "models/backward.h"

namespace ferry::models {

Builder::Builder(std::string kind, Sequence sequence) : seq_(sequence) { spec_.kind = std::move(kind); }

int Builder::param(const std::string& name, Shape shape) {
  spec_.params.push_back({name, std::move(shape)});
  return static_cast<int>(spec_.params.size()) - 1;
}

int Builder::vocab_param(const std::string& name, int64_t vocab, Shape rest) {
  rest.insert(rest.begin(), padded_vocab(vocab, vocab_multiple));
  const int p = param(name, std::move(rest));
  spec_.params[p].vocab = vocab;
  return p;
}

std::vector<int> Builder::weight_and_bias(const std::string& prefix, Shape weight, Shape bias) {
  const int w = param(prefix + "weight", std::move(weight));
  return {w, param(prefix + "bias", std::move(bias))};
}

int Builder::input(const std::string& name) {
  spec_.tensors.push_back({name, {seq_.batch, seq_.seq}, DType::I32, false, true, true});
  return static_cast<int>(spec_.tensors.size()) - 1;
}

int Builder::activation(const std::string& name, Shape shape) {
  spec_.tensors.push_back({name, std::move(shape), DType::F32, false, false});
  return static_cast<int>(spec_.tensors.size()) - 1;
}

int Builder::statistic(const std::string& name, Shape shape) {
  spec_.tensors.push_back({name, std::move(shape), DType::F32, false, false, true});
  return static_cast<int>(spec_.tensors.size()) - 1;
}

int64_t Builder::width(int tensor) const { return spec_.tensors.at(tensor).shape.back(); }

int Builder::forward(const std::string& name, OpKind kind, std::vector<int> params, std::vector<int> inputs,
                     std::vector<int> outputs, const OpAttrs& attrs, double flops) {
  const int out = outputs.at(0);
  spec_.ops.push_back({name + ".fwd", kind, Pass::Forward, std::move(params), std::move(inputs), std::move(outputs),
                       attrs, flops, layer, {}, {}});
  return out;
}

OpAttrs Builder::rows_of(int64_t channels) const {
  OpAttrs a;
  a.rows = seq_.batch * seq_.seq, a.in = channels;
  return a;
}

OpAttrs Builder::sequence_attrs(int64_t channels) const {
  OpAttrs a = rows_of(channels);
  a.batch = seq_.batch, a.seq = seq_.seq, a.heads = seq_.heads, a.causal = seq_.causal;
  return a;
}

int Builder::embedding(const std::string& name, const std::vector<int>& params, int tokens) {
  const int64_t C = spec_.params.at(params.at(0)).shape.at(1);
  const int out = activation(name + ".out", {seq_.batch, seq_.seq, C});
  const OpAttrs a = sequence_attrs(C);
  const double adds = static_cast<double>(params.size() - 1);  // one per table beyond the first, per element
  return forward(name, OpKind::Embedding, params, {tokens}, {out}, a, adds * a.rows * C);
}

int Builder::layernorm(const std::string& name, const std::vector<int>& params, int x, float eps) {
  const int64_t C = width(x), B = seq_.batch, T = seq_.seq;
  const int out = activation(name + ".out", {B, T, C});
  const int mean = statistic(name + ".mean", {B, T});
  const int rstd = statistic(name + ".rstd", {B, T});
  OpAttrs a = rows_of(C);
  a.eps = eps;
  return forward(name, OpKind::LayerNorm, params, {x}, {out, mean, rstd}, a, 8.0 * a.rows * C);
}

int Builder::rmsnorm(const std::string& name, const std::vector<int>& params, int x, float eps) {
  const int64_t C = width(x), B = seq_.batch, T = seq_.seq;
  const int out = activation(name + ".out", {B, T, C});
  const int rstd = statistic(name + ".rstd", {B, T});
  OpAttrs a = rows_of(C);
  a.eps = eps;
  return forward(name, OpKind::RmsNorm, params, {x}, {out, rstd}, a, 4.0 * a.rows * C);
}

int Builder::linear(const std::string& name, const std::vector<int>& params, int x, WeightLayout layout) {
  const Shape& w = spec_.params.at(params.at(0)).shape;
  const bool out_in = layout == WeightLayout::OutIn;
  const int64_t in = out_in ? w.at(1) : w.at(0), out_features = out_in ? w.at(0) : w.at(1);
  if (in != width(x))
    throw std::invalid_argument(name + ": weight " + spec_.params[params[0]].name + " takes " + std::to_string(in) +
                                " features, its input " + spec_.tensors[x].name + " has " + std::to_string(width(x)));
  const int out = activation(name + ".out", {seq_.batch, seq_.seq, out_features});
  OpAttrs a = rows_of(in);
  a.out = out_features, a.weight_out_in = out_in;
  return forward(name, OpKind::Linear, params, {x}, {out}, a, 2.0 * a.rows * in * out_features);
}

int Builder::attention(const std::string& name, const std::vector<int>& inputs) {
  const int64_t C = inputs.size() == 1 ? width(inputs[0]) / 3 : width(inputs.at(0)), B = seq_.batch, T = seq_.seq;
  const int out = activation(name + ".out", {B, T, C});
  const int probs = activation(name + ".probs", {B, seq_.heads, T, T});
  OpAttrs a = sequence_attrs(C);
  if (inputs.size() == 3) {  // {q, k, v}: k's width is its heads' (grouped-query attention)
    const int64_t head_size = C / seq_.heads, kv_width = width(inputs[1]);
    if (kv_width % head_size != 0 || seq_.heads % (kv_width / head_size) != 0 || width(inputs[2]) != kv_width)
      throw std::invalid_argument(name + ": k and v of width " + std::to_string(kv_width) +
                                  " are no whole number of heads of " + std::to_string(head_size) +
                                  " that divides the " + std::to_string(seq_.heads) + " query heads");
    a.kv_heads = kv_width / head_size;
  }
  return forward(name, OpKind::Attention, {}, inputs, {out, probs}, a, 4.0 * B * T * T * C);
}

int Builder::rope(const std::string& name, int x, int64_t heads, const RopeScaling& scaling) {
  const int out = activation(name + ".out", {seq_.batch, seq_.seq, width(x)});
  OpAttrs a = sequence_attrs(width(x));
  a.heads = heads, a.rope = scaling;
  return forward(name, OpKind::Rope, {}, {x}, {out}, a, 3.0 * a.rows * a.in);  // two products and a sum per element
}

int Builder::swiglu(const std::string& name, int gate, int up) {
  const int out = activation(name + ".out", {seq_.batch, seq_.seq, width(gate)});
  const OpAttrs a = rows_of(width(gate));
  return forward(name, OpKind::SwiGlu, {}, {gate, up}, {out}, a, 6.0 * a.rows * a.in);  // exp, divide, two products
}

int Builder::gelu(const std::string& name, int x, GeluForm form) {
  const int out = activation(name + ".out", {seq_.batch, seq_.seq, width(x)});
  OpAttrs a = rows_of(width(x));
  a.exact_gelu = form == GeluForm::Erf;
  return forward(name, OpKind::Gelu, {}, {x}, {out}, a, 10.0 * a.rows * a.in);
}

int Builder::residual(const std::string& name, int a, int b) {
  const int out = activation(name + ".out", {seq_.batch, seq_.seq, width(a)});
  const OpAttrs attrs = rows_of(width(a));
  return forward(name, OpKind::Residual, {}, {a, b}, {out}, attrs, 1.0 * attrs.rows * attrs.in);
}

int Builder::cross_entropy(const std::string& name, int logits, int targets, int64_t vocab) {
  if (vocab < 1 || vocab > width(logits))
    throw std::invalid_argument(name + ": a vocabulary of " + std::to_string(vocab) + " for logits of width " +
                                std::to_string(width(logits)));
  const int losses = statistic(name + ".out", {seq_.batch, seq_.seq});
  OpAttrs a = rows_of(width(logits));
  a.out = vocab;
  return forward(name, OpKind::CrossEntropy, {}, {logits, targets}, {losses}, a, 3.0 * a.rows * a.out);
}

ModelSpec Builder::finish() && {
  append_backward(spec_);
  spec_.finalize();
  return std::move(spec_);
}

}  // namespace ferry::models
