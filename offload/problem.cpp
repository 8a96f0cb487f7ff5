// OffloadProblem: derived once from the ModelSpec, a bucket layout and the cost model.
#include "offload/problem.h"

#include <algorithm>
#include <numeric>

namespace ferry::offload {

OffloadProblem::OffloadProblem(const models::ModelSpec& spec, const CostModel& c, int64_t bucket_size,
                               int64_t budget)
    : n_ops(static_cast<int>(spec.ops.size())), cost(c), budget_bytes(budget) {
  std::vector<memory::BucketLayout::Param> order;
  for (int id : spec.params_in_first_use_order()) order.push_back({id, spec.params[id].shape});
  const memory::BucketLayout layout(order, bucket_size, c.weight_bytes == 4 ? memory::DType::F32 : memory::DType::BF16);
  n_buckets = static_cast<int>(layout.buckets().size());
  for (const auto& b : layout.buckets()) {
    int64_t n = 0;
    for (int p : b.params) n += layout.slot(p).numel;
    bucket_params.push_back(n);
    bucket_bytes.push_back(b.numel * c.weight_bytes);
  }
  first_grad_op.assign(n_buckets, -1);
  last_grad_op.assign(n_buckets, -1);
  op_buckets.resize(n_ops);
  for (int i = 0; i < n_ops; ++i) {
    const auto& op = spec.ops[i];
    op_seconds.push_back(c.op_seconds(spec, op));
    for (int p : op.params) {
      const int b = layout.slot(p).bucket;
      if (std::find(op_buckets[i].begin(), op_buckets[i].end(), b) == op_buckets[i].end()) op_buckets[i].push_back(b);
      if (op.pass == models::Pass::Backward) {
        if (first_grad_op[b] < 0) first_grad_op[b] = i;
        last_grad_op[b] = i;
      }
    }
  }
  activations.resize(spec.tensors.size());
  for (size_t t = 0; t < spec.tensors.size(); ++t) activations[t].bytes = c.tensor_bytes(spec, static_cast<int>(t));
  for (int i = 0; i < n_ops; ++i) {
    for (int t : spec.ops[i].creates) activations[t].first = i;
    for (int t : spec.ops[i].frees) activations[t].last = i;
  }
  for (size_t t = 0; t < spec.tensors.size(); ++t)
    if (spec.tensors[t].is_input) activations[t].first = 0, activations[t].last = n_ops - 1;
  activation_live.assign(n_ops + 1, 0);
  for (const auto& a : activations) {
    activation_live[a.first] += a.bytes;
    activation_live[a.last + 1] -= a.bytes;
  }
  std::partial_sum(activation_live.begin(), activation_live.end(), activation_live.begin());
  activation_live.pop_back();
}

int64_t OffloadProblem::total_params() const { return std::accumulate(bucket_params.begin(), bucket_params.end(), int64_t(0)); }
int64_t OffloadProblem::total_weight_bytes() const { return std::accumulate(bucket_bytes.begin(), bucket_bytes.end(), int64_t(0)); }

}  // namespace ferry::offload
