// The backward rule of each op kind, in one table, and the tape reversal that applies it to a forward op list.
#include "models/backward.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace ferry::models {
namespace {

// What a kind's backward op reads, beyond the gradient of the forward op's first output (the only output that
// is differentiated; the others are statistics the forward saves for backward). The slots this makes are the
// ones models/op_dispatch.cpp documents.
struct BackwardRule {
  OpKind kind;
  bool reads_grad;         // false for the loss: the root, where the chain of gradients starts
  bool reads_inputs;       // the forward inputs, in order
  std::vector<int> saved;  // forward output slots read back
  int flops_num, flops_den;  // backward FLOPs = forward FLOPs * num / den (a ratio, so counts stay exact)
  bool in_place = false;     // its first input's gradient takes that input's memory (the op reads it last)
};

// clang-format off
const BackwardRule kRules[] = {
    // kind                reads dy  reads x  saved outputs       FLOPs x forward
    {OpKind::Embedding,    true,     true,    {},                 2, 1},  // x: the tokens, to scatter by
    {OpKind::LayerNorm,    true,     true,    {1, 2},             3, 2},  // mean, rstd
    {OpKind::Linear,       true,     true,    {},                 2, 1},  // dx and dW: two matmuls
    {OpKind::Attention,    true,     true,    {1, 0},             2, 1},  // probs; y (a fused backward's rowsum(dy * y))
    {OpKind::Gelu,         true,     true,    {},                 2, 1},
    {OpKind::Residual,     true,     false,   {},                 2, 1},  // dy flows to both inputs as is
    {OpKind::CrossEntropy, false,    true,    {0},                4, 3, true},  // softmax - onehot(targets); losses: lse - logit
    {OpKind::RmsNorm,      true,     true,    {1},                2, 1},  // rstd
    {OpKind::Rope,         true,     false,   {},                 1, 1},  // dy rotated back: the angles need no input
    {OpKind::SwiGlu,       true,     true,    {},                 2, 1},  // gate, up
};
// clang-format on

const BackwardRule& rule_of(OpKind kind) {
  for (const BackwardRule& rule : kRules)
    if (rule.kind == kind) return rule;
  throw std::logic_error(std::string("no backward rule for op kind ") + to_string(kind));
}

std::string backward_name(const std::string& forward) {
  if (!forward.ends_with(".fwd")) throw std::logic_error("forward op '" + forward + "' is not named <name>.fwd");
  return forward.substr(0, forward.size() - 4) + ".bwd";
}

// The gradient tensors of the pass: each is created by the first backward op that writes it and shared by
// every later one, which accumulates into it.
class Gradients {
 public:
  explicit Gradients(ModelSpec& spec) : spec_(spec), of_(spec.tensors.size(), -1) {}

  int written(int t) {
    if (of_.at(t) < 0) {
      const TensorSpec& x = spec_.tensors[t];
      spec_.tensors.push_back({x.name + ".grad", x.shape, x.dtype, true, false});
      of_[t] = static_cast<int>(spec_.tensors.size()) - 1;
    }
    return of_[t];
  }
  int read(int t, const std::string& reader) const {
    if (of_.at(t) < 0)
      throw std::logic_error(reader + " reads the gradient of " + spec_.tensors[t].name +
                             ", which no later op differentiates: it does not reach the loss");
    return of_[t];
  }

 private:
  ModelSpec& spec_;
  std::vector<int> of_;  // forward tensor -> its gradient tensor, or -1
};

}  // namespace

void append_backward(ModelSpec& spec) {
  Gradients grads(spec);
  for (size_t i = spec.ops.size(); i-- > 0;) {
    const OpSpec fwd = spec.ops[i];  // a copy: appending to ops moves them
    if (fwd.pass != Pass::Forward) throw std::logic_error("append_backward: op " + fwd.name + " is not forward");
    const BackwardRule& rule = rule_of(fwd.kind);
    OpSpec bwd{backward_name(fwd.name), fwd.kind, Pass::Backward, fwd.params, {}, {}, fwd.attrs,
               fwd.flops * rule.flops_num / rule.flops_den, fwd.layer, {}, {}};
    if (rule.reads_grad) bwd.inputs.push_back(grads.read(fwd.outputs.at(0), bwd.name));
    if (rule.reads_inputs) bwd.inputs.insert(bwd.inputs.end(), fwd.inputs.begin(), fwd.inputs.end());
    for (int slot : rule.saved) {
      if (slot >= static_cast<int>(fwd.outputs.size()))
        throw std::logic_error(fwd.name + " has no output " + std::to_string(slot) + " for its backward to read");
      bwd.inputs.push_back(fwd.outputs[slot]);
    }
    for (int t : fwd.inputs)
      if (!spec.tensors[t].is_input) bwd.outputs.push_back(grads.written(t));
    if (rule.in_place && !bwd.outputs.empty()) spec.tensors[bwd.outputs[0]].in_place_of = fwd.inputs.at(0);
    spec.ops.push_back(std::move(bwd));
  }
}

}  // namespace ferry::models
