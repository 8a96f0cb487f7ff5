// DeviceBindings: where a step plan puts every device tensor in the arena (activations, weight windows,
// resident weights, gradients, device optimizer state) and, per op of the step's timeline, the addresses
// of its operands. Built once from the plan's device memory; with red zones, it also arms and checks the
// canary bytes that follow every planned tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/op_kernels.h"
#include "memory/arena.h"
#include "models/model_spec.h"
#include "offload/policies.h"

namespace ferry::engine {

class DeviceBindings {
 public:
  // arena: the device arena's base; red_zone_bytes: the padding the plan left after every tensor (0: none).
  DeviceBindings(const models::ModelSpec& spec, const offload::StepPlan& plan, std::byte* arena, int64_t red_zone_bytes);

  // A travelling bucket's stay on the device: from its prefetch (first) to its release (last).
  struct Window {
    int first, last;
    int tensor;  // index into the plan's device tensors
  };
  // Per bucket. A missing one (no resident slot, no gradients, optimizer on the CPU) is -1 / null.
  int resident_tensor(int bucket) const { return resident_[bucket]; }
  int grads_tensor(int bucket) const { return grads_[bucket]; }
  int state_tensor(int bucket) const { return state_[bucket]; }    // fp32 master, m, v (device AdamW)
  int gradsum_tensor(int bucket) const { return gradsum_[bucket]; }  // fp32 sum over micro-batches
  const std::vector<Window>& windows(int bucket) const { return windows_[bucket]; }
  const std::string& bucket_label(int bucket) const { return bucket_label_[bucket]; }
  const std::vector<std::string>& bucket_labels() const { return bucket_label_; }
  // The libraries' scratch (one tensor alive the whole step); -1 when the plan has none.
  int workspace_tensor() const { return workspace_; }
  // A batch input's (tokens, targets, attention_mask) device tensor; -1 when the model has none.
  int input_tensor(const std::string& name) const;

  std::byte* address(int tensor) const { return arena_ + offsets_[tensor]; }
  float* floats(int tensor) const { return reinterpret_cast<float*>(address(tensor)); }
  int64_t bytes(int tensor) const { return bytes_[tensor]; }  // without its red zone
  int tensor_count() const { return static_cast<int>(bytes_.size()); }

  // One op of the timeline: its label, its operands (as op.inputs / op.outputs / op.params list them),
  // the device tensors it touches, the activations whose life begins with it, and the gradient buffers
  // to zero before it (its buckets' first gradient op) and to sum after it (their last, with the device
  // optimizer and accumulation).
  struct Op {
    std::string label;
    std::vector<kernels::Operand> inputs, outputs, values, grads;  // each with its storage dtype
    std::vector<int> touched, created;
    std::vector<int> zero_grads_before, sum_grads_after;
  };
  const Op& op(int t) const { return ops_[t]; }

  // Red zones (only with red_zone_bytes > 0): arm writes the canary pattern after a tensor when its life
  // begins; check says what overwrote it, or returns "" when intact.
  bool has_red_zones() const { return red_zone_ > 0; }
  void arm(int tensor) const;
  std::string check(int tensor) const;

 private:
  void place(const models::ModelSpec& spec, const offload::StepPlan& plan);
  void bind(const models::ModelSpec& spec, const offload::StepPlan& plan);
  std::byte* activation_at(const models::ModelSpec& spec, int spec_tensor, int op, int* tensor) const;
  int weights_at(int bucket, int op) const;

  std::byte* arena_;
  int64_t red_zone_;
  std::vector<int64_t> offsets_, bytes_;
  std::vector<memory::TensorLifetime> lives_;
  std::vector<std::string> names_;  // per device tensor, for red-zone reports
  std::vector<int> resident_, grads_, state_, gradsum_;
  int workspace_ = -1;
  std::vector<std::vector<Window>> windows_;
  std::vector<std::vector<int>> entries_of_;  // spec tensor -> its activation device tensors
  std::vector<std::string> bucket_label_;
  std::vector<std::string> input_names_;
  std::vector<int> input_tensors_;
  std::vector<Op> ops_;
};

}  // namespace ferry::engine
