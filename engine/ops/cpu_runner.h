// CpuRunner: runs a ModelSpec's op list on the CPU, one op at a time, against a ParameterStore.
// Activations live in one arena (the host device's: a capped host allocation) laid out by the memory
// Planner from their lifetimes, so tensors that are never alive together share memory. They are stored in
// spec.precision, and with a 2-byte precision so are the weights and gradients the ops see: a working copy
// rounded from the store's fp32 values each pass, its gradients added into the store's fp32 ones.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/op_kernels.h"
#include "memory/arena.h"
#include "memory/host_buffer.h"
#include "memory/planner.h"
#include "models/model_spec.h"
#include "models/parameter_store.h"

namespace ferry::ops {

class CpuRunner {
 public:
  CpuRunner(const models::ModelSpec& spec, models::ParameterStore& params);

  // Copies a batch (B*T tokens and targets, and for BERT the attention mask: empty means no padding) into
  // the spec's input tensors.
  void set_batch(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                 std::span<const int32_t> attention_mask = {});
  // Runs the forward ops (loss included); returns the mean loss over the batch.
  float forward();
  // Runs every op. Parameter grads accumulate d(loss_weight * mean loss)/dparam into the store.
  float forward_backward(float loss_weight = 1.0f);
  // Runs one op. With a 2-byte precision it reads the working copy of the weights rounded by the last
  // forward(), forward_backward() or profile_ops(), and its parameter gradients stay in the working copy.
  void run_op(const models::OpSpec& op);
  // Each op's time (its fastest over forward+backward passes on the current batch: at least min_reps
  // passes and min_seconds in all, at most max_reps), indexed like spec.ops: the host device's measured
  // cost of every op, for the planner and the Simulator.
  std::vector<double> profile_ops(int min_reps, double min_seconds, int max_reps);

  // A floating tensor's current contents, as fp32 (widened from the precision); meaningful only while it
  // is alive (its memory is reused after).
  std::vector<float> tensor(const std::string& name) const;
  float last_loss() const { return last_loss_; }
  // Where tensor `t` (spec.tensors' index) lives in the arena: its bytes are other tensors' outside its lifetime.
  std::byte* data(int t) const { return tensor_ptr_[static_cast<size_t>(t)]; }
  const memory::ArenaLayout& activation_plan() const { return plan_; }

 private:
  const models::ModelSpec& spec_;
  models::ParameterStore& params_;
  memory::ArenaLayout plan_;     // offset of every tensor in arena_
  memory::Arena arena_;   // the host device's arena: allocated once, here
  std::vector<std::byte*> tensor_ptr_;  // per tensor: its place in arena_
  // The weights and their gradients in the precision (empty for fp32, whose ops use params_ in place).
  memory::HostBuffer working_values_, working_grads_;
  std::vector<kernels::Operand> value_, grad_;  // per parameter: what the ops read and accumulate into
  float loss_weight_ = 1.0f;
  float last_loss_ = 0.0f;

  bool working_copy() const { return spec_.precision != DType::F32; }
  void round_parameters();  // the store's fp32 values into the working copy (nearest even)
  void add_gradients();     // the working gradients, widened, into the store's fp32 gradients
};

}  // namespace ferry::ops
