// ModelSpec lookups, FLOP totals, and lifetime derivation + validation of the op list.
#include "models/model_spec.h"

#include <algorithm>
#include <stdexcept>

namespace ferry::models {

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const char* to_string(OpKind kind) {
  switch (kind) {
    case OpKind::Embedding: return "embedding";
    case OpKind::LayerNorm: return "layernorm";
    case OpKind::Linear: return "linear";
    case OpKind::Attention: return "attention";
    case OpKind::Gelu: return "gelu";
    case OpKind::Residual: return "residual";
    case OpKind::CrossEntropy: return "cross_entropy";
    case OpKind::RmsNorm: return "rmsnorm";
    case OpKind::Rope: return "rope";
    case OpKind::SwiGlu: return "swiglu";
  }
  return "?";
}

Shape ParamSpec::file_shape() const {
  Shape s = shape;
  if (vocab > 0) s.at(0) = vocab;
  return s;
}

int ModelSpec::param_index(const std::string& name) const {
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].name == name) return static_cast<int>(i);
  throw std::out_of_range("model has no parameter named '" + name + "'");
}

int ModelSpec::tensor_index(const std::string& name) const {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name) return static_cast<int>(i);
  throw std::out_of_range("model has no tensor named '" + name + "'");
}

int64_t ModelSpec::param_count() const {
  int64_t n = 0;
  for (const auto& p : params) n += numel(p.file_shape());
  return n;
}

double ModelSpec::step_flops() const {
  double f = 0;
  for (const auto& op : ops) f += op.flops;
  return f;
}

double ModelSpec::forward_flops() const {
  double f = 0;
  for (const auto& op : ops)
    if (op.pass == Pass::Forward) f += op.flops;
  return f;
}

std::vector<memory::TensorLifetime> ModelSpec::tensor_lifetimes() const {
  std::vector<memory::TensorLifetime> out(tensors.size());
  for (size_t t = 0; t < tensors.size(); ++t)
    out[t].bytes = tensors[t].bytes(), out[t].in_place_of = tensors[t].in_place_of;
  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    for (int t : ops[i].creates) out[t].first = i;
    for (int t : ops[i].frees) out[t].last = i;
  }
  for (size_t t = 0; t < tensors.size(); ++t)
    if (tensors[t].is_input) out[t].first = 0, out[t].last = static_cast<int>(ops.size()) - 1;
  return out;
}

std::vector<int> ModelSpec::params_in_first_use_order() const {
  std::vector<int> order;
  std::vector<bool> seen(params.size(), false);
  for (const auto& op : ops)
    for (int p : op.params)
      if (!seen[p]) seen[p] = true, order.push_back(p);
  for (size_t p = 0; p < params.size(); ++p)  // parameters no op uses still get a place, last
    if (!seen[p]) order.push_back(static_cast<int>(p));
  return order;
}

void ModelSpec::finalize() {
  const int n_tensors = static_cast<int>(tensors.size());
  std::vector<int> first(n_tensors, -1), last(n_tensors, -1);
  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    OpSpec& op = ops[i];
    op.creates.clear();
    op.frees.clear();
    for (int p : op.params)
      if (p < 0 || p >= static_cast<int>(params.size()))
        throw std::logic_error("op " + op.name + ": parameter index out of range");
    for (int t : op.inputs) {
      if (t < 0 || t >= n_tensors) throw std::logic_error("op " + op.name + ": input index out of range");
      if (first[t] < 0 && !tensors[t].is_input)
        throw std::logic_error("op " + op.name + " reads " + tensors[t].name + " before any op writes it");
      if (first[t] < 0) first[t] = i;
      last[t] = i;
    }
    for (int t : op.outputs) {
      if (t < 0 || t >= n_tensors) throw std::logic_error("op " + op.name + ": output index out of range");
      if (tensors[t].is_input) throw std::logic_error("op " + op.name + " writes batch input " + tensors[t].name);
      if (first[t] < 0) first[t] = i;
      last[t] = i;
    }
  }
  for (int t = 0; t < n_tensors; ++t) {
    if (first[t] < 0) throw std::logic_error("tensor " + tensors[t].name + " is never used");
    ops[first[t]].creates.push_back(t);
    ops[last[t]].frees.push_back(t);
  }
}

bool ModelSpec::creates_gradient(const OpSpec& op, int t) const {
  return tensors[t].is_grad && std::ranges::find(op.creates, t) != op.creates.end();
}

bool ModelSpec::writes_gradients(const OpSpec& op) const {
  if (op.pass == Pass::Forward || op.outputs.empty()) return false;
  return std::ranges::all_of(op.outputs, [&](int t) { return creates_gradient(op, t); });
}

void ModelSpec::set_precision(DType storage) {
  if (storage == DType::I32) throw std::invalid_argument("a model is stored in fp32, bf16 or fp16, not int32");
  precision = storage;
  for (TensorSpec& t : tensors)
    if (!t.fixed_dtype) t.dtype = storage;
}

}  // namespace ferry::models
