// OffloadProblem: what every policy plans over: the step's ops with their compute times, the parameter
// buckets each op uses, when backward finishes each bucket's gradients, the activations' lifetimes, and
// the device memory budget.
#pragma once

#include <cstdint>
#include <vector>

#include "memory/bucket_layout.h"
#include "memory/planner.h"
#include "models/model_spec.h"
#include "offload/cost_model.h"

namespace ferry::offload {

struct OffloadProblem {
  // checkpointed: per transformer block (op.layer), whether its activations are dropped after forward and
  // recomputed right before its backward (the recomputation ops join the step's timeline). Empty: none;
  // missing entries are false, entries beyond the model's blocks are ignored. workspace_bytes: see below.
  OffloadProblem(const models::ModelSpec& spec, const CostModel& cost, int64_t bucket_bytes, int64_t budget_bytes,
                 const std::vector<bool>& checkpointed = {}, int grad_accum = 1, int64_t workspace_bytes = 0);

  DType precision;                  // the weights' and gradients' storage on the device (spec.precision)
  memory::BucketLayout layout;      // the buckets, in the element type that travels (precision)
  int grad_accum = 1;               // micro-batches per step: the device optimizer then keeps fp32 gradient sums
  // optim.state: compact: bf16 weights, m and v on the host only (memory::HostBuckets), which the CPU's AdamW
  // updates for every bucket: no plan has a device tier or the resident policy's device AdamW.
  bool compact_state = false;
  // The CPU AdamW's rate on this problem's optimizer state (the cost model's exact or compact one).
  double cpu_adam_params_per_s() const {
    return compact_state ? cost.cpu_compact_adam_params_per_s : cost.cpu_adam_params_per_s;
  }

  // The step's timeline: the spec's ops with the recomputations inserted. Everything below is indexed by it.
  int n_ops = 0;
  int forward_ops = 0;              // the first ops of the timeline: the forward pass, up to the loss
  std::vector<int> op_source;       // the spec op each timeline op runs
  std::vector<bool> op_recompute;   // a recomputation of a forward op
  int n_layers = 0;                 // transformer blocks (op.layer): the units activation checkpointing recomputes
  int checkpointed_layers = 0;
  int n_buckets = 0;
  CostModel cost;
  int64_t budget_bytes = 0;
  // Scratch the device's libraries need while an op runs (PlanRequest::workspace_bytes): one device tensor
  // alive over the whole step, so every policy's fit and the least memory any plan needs count it.
  int64_t workspace_bytes = 0;
  std::vector<double> op_seconds;                 // per op
  std::vector<std::vector<int>> op_buckets;       // buckets each op reads (forward) or reads and writes grads of
  std::vector<int64_t> bucket_params;             // parameters per bucket
  std::vector<int64_t> bucket_bytes;              // bytes of a bucket's working copy (and of its gradients)
  std::vector<int> last_grad_op;                  // last backward op that writes the bucket's gradients
  std::vector<int> first_grad_op;                 // first backward op that writes them; -1: none (a frozen bucket)
  std::vector<memory::TensorLifetime> activations;  // at the device's element size
  std::vector<int> activation_tensor;             // the spec tensor of each entry (a checkpointed one has two)
  std::vector<int64_t> activation_live;           // activation bytes alive at each op

  int64_t total_params() const;
  int64_t trained_params() const;  // in buckets with gradients: what an optimizer updates (frozen ones excluded)
  int64_t total_weight_bytes() const;
  int64_t bucket_numel(int b) const { return bucket_bytes[b] / dtype_bytes(precision); }  // padded elements

 private:
  // The constructor's passes, in this order; `checkpointed` has one entry per block.
  void build_timeline(const models::ModelSpec& spec, const std::vector<bool>& checkpointed);
  void index_buckets(const models::ModelSpec& spec);
  void add_activations(const models::ModelSpec& spec, const std::vector<bool>& checkpointed);
};

}  // namespace ferry::offload
