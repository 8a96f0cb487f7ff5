// OffloadProblem: derived once from the ModelSpec, a bucket layout and the cost model, in three passes:
// the timeline (recomputations inserted), the buckets each op touches, and the activations' lifetimes.
#include "offload/problem.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

namespace ferry::offload {
namespace {

memory::BucketLayout make_layout(const models::ModelSpec& spec, int64_t bucket_size) {
  std::vector<memory::BucketLayout::Param> order;
  for (int id : spec.params_in_first_use_order()) order.push_back({id, spec.params[id].shape, spec.params[id].frozen});
  return memory::BucketLayout(order, bucket_size, spec.precision);
}

// A tensor's uses over the timeline, split by when they happen.
struct Uses {
  static constexpr int kNone = -1;
  int fwd_first = kNone, fwd_last = kNone;    // original forward ops
  int late_first = kNone, late_last = kNone;  // recomputations, backward, and what follows the first of them
  int all_first = kNone, all_last = kNone;
  bool internal = true;  // every original forward use is inside the creating block
  int layer = -2;        // the block whose forward op first writes it

  static void widen(int& first, int& last, int t) {
    if (first == kNone || t < first) first = t;
    if (last == kNone || t > last) last = t;
  }
  void add(const models::OpSpec& op, bool recompute, int t) {
    widen(all_first, all_last, t);
    if (op.pass == models::Pass::Forward && !recompute) {
      if (layer == -2) layer = op.layer;
      if (op.layer != layer || op.layer < 0) internal = false;
      widen(fwd_first, fwd_last, t);
    } else if (recompute || late_first != kNone) {
      widen(late_first, late_last, t);
    }
  }
};

}  // namespace

OffloadProblem::OffloadProblem(const models::ModelSpec& spec, const CostModel& c, int64_t bucket_size,
                               int64_t budget, const std::vector<bool>& checkpointed, int accum, int64_t workspace)
    : precision(spec.precision),
      layout(make_layout(spec, bucket_size)),
      grad_accum(accum),
      cost(c),
      budget_bytes(budget),
      workspace_bytes(workspace) {
  if (workspace < 0)
    throw std::invalid_argument("workspace_bytes: " + std::to_string(workspace) + " is negative; use 0 when the device's libraries need no scratch");
  std::vector<bool> ckpt = checkpointed;
  for (const auto& op : spec.ops) n_layers = std::max(n_layers, op.layer + 1);
  ckpt.resize(n_layers, false);
  checkpointed_layers = static_cast<int>(std::count(ckpt.begin(), ckpt.end(), true));
  build_timeline(spec, ckpt);
  index_buckets(spec);
  add_activations(spec, ckpt);
}

// Before the first backward op of a checkpointed block, its forward ops run again.
void OffloadProblem::build_timeline(const models::ModelSpec& spec, const std::vector<bool>& checkpointed) {
  std::vector<std::vector<int>> forward_of_layer(n_layers);
  for (int i = 0; i < static_cast<int>(spec.ops.size()); ++i) {
    const auto& op = spec.ops[i];
    if (op.pass == models::Pass::Forward && op.layer >= 0) forward_of_layer[op.layer].push_back(i);
  }
  std::vector<bool> recomputed(n_layers, false);
  for (int i = 0; i < static_cast<int>(spec.ops.size()); ++i) {
    const auto& op = spec.ops[i];
    if (op.pass == models::Pass::Backward && op.layer >= 0 && checkpointed[op.layer] && !recomputed[op.layer]) {
      recomputed[op.layer] = true;
      for (int f : forward_of_layer[op.layer]) op_source.push_back(f), op_recompute.push_back(true);
    }
    op_source.push_back(i);
    op_recompute.push_back(false);
  }
  n_ops = static_cast<int>(op_source.size());
  while (forward_ops < n_ops && spec.ops[op_source[forward_ops]].pass == models::Pass::Forward) ++forward_ops;
}

// Each bucket's size, the buckets each timeline op touches, and which ops write each bucket's gradients.
void OffloadProblem::index_buckets(const models::ModelSpec& spec) {
  n_buckets = static_cast<int>(layout.buckets().size());
  for (const auto& b : layout.buckets()) {
    int64_t n = 0;
    for (int p : b.params) n += layout.slot(p).numel;
    bucket_params.push_back(n);
    bucket_bytes.push_back(b.numel * dtype_bytes(precision));
  }
  first_grad_op.assign(n_buckets, -1);
  last_grad_op.assign(n_buckets, -1);
  op_buckets.resize(n_ops);
  for (int t = 0; t < n_ops; ++t) {
    const auto& op = spec.ops[op_source[t]];
    op_seconds.push_back(cost.op_seconds(spec, op));
    for (int p : op.params) {
      const int b = layout.slot(p).bucket;
      if (std::find(op_buckets[t].begin(), op_buckets[t].end(), b) == op_buckets[t].end()) op_buckets[t].push_back(b);
      if (op.pass != models::Pass::Backward || spec.params[p].frozen) continue;  // backward reads a frozen weight, writes no gradient
      if (first_grad_op[b] < 0) first_grad_op[b] = t;
      last_grad_op[b] = t;
    }
  }
}

// Activation lifetimes over the timeline. A tensor made inside a checkpointed block and used in forward
// only by that block lives twice: from its forward birth to its last forward use, and from its
// recomputation to its last use in backward.
void OffloadProblem::add_activations(const models::ModelSpec& spec, const std::vector<bool>& checkpointed) {
  std::vector<Uses> uses(spec.tensors.size());
  for (int t = 0; t < n_ops; ++t) {
    const auto& op = spec.ops[op_source[t]];
    for (const auto* list : {&op.inputs, &op.outputs})
      for (int x : *list) uses[x].add(op, op_recompute[t], t);
  }
  std::vector<int> entry_of(spec.tensors.size(), -1);  // a tensor's (last) entry in activations
  for (int x = 0; x < static_cast<int>(spec.tensors.size()); ++x) {
    const Uses& u = uses[x];
    const int64_t bytes = cost.tensor_bytes(spec, x);
    const bool twice = u.internal && u.layer >= 0 && checkpointed[u.layer] && u.late_first != Uses::kNone;
    if (spec.tensors[x].is_input) {
      activations.push_back({bytes, 256, 0, n_ops - 1});
    } else if (twice) {
      activations.push_back({bytes, 256, u.fwd_first, u.fwd_last});
      activation_tensor.push_back(x);
      activations.push_back({bytes, 256, u.late_first, u.late_last});
    } else {
      activations.push_back({bytes, 256, u.all_first, u.all_last});
    }
    activation_tensor.push_back(x);
    entry_of[x] = static_cast<int>(activations.size()) - 1;
  }
  for (int x = 0; x < static_cast<int>(spec.tensors.size()); ++x)  // the loss's gradient over the logits
    if (const int taken = spec.tensors[x].in_place_of; taken >= 0)
      activations[entry_of[x]].in_place_of = entry_of[taken];
  activation_live = memory::Planner::live_bytes(activations, n_ops);
}

int64_t OffloadProblem::total_params() const { return std::accumulate(bucket_params.begin(), bucket_params.end(), int64_t(0)); }
int64_t OffloadProblem::trained_params() const {
  int64_t n = 0;
  for (int b = 0; b < n_buckets; ++b)
    if (first_grad_op[b] >= 0) n += bucket_params[b];
  return n;
}

int64_t OffloadProblem::total_weight_bytes() const { return std::accumulate(bucket_bytes.begin(), bucket_bytes.end(), int64_t(0)); }

}  // namespace ferry::offload
