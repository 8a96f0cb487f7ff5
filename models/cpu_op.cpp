// run_cpu_op: an op on the CPU whatever its operands' storage. Operands stored in bf16/fp16 are staged as
// fp32 in this thread's Storage workspace around the op (the one place the CPU widens and narrows an op's
// operands); fp32 and int32 ones are used in place. The math runs through dispatch_op on CpuKernels.
#include "models/cpu_op.h"

#include <array>
#include <vector>

#include "memory/convert.h"
#include "memory/host_buffer.h"
#include "kernels/cpu/cpu_kernels.h"
#include "models/op_dispatch.h"
#include "kernels/cpu/workspace.h"

namespace ferry::models {
namespace {

bool two_byte(Operand o) { return o.data && dtype_bytes(o.dtype) == 2; }

// An op's operands as the fp32 kernels take them. What a 2-byte operand's copy starts from: what the op
// reads (inputs, parameter values) and what it accumulates into (backward outputs, parameter gradients)
// are widened; forward outputs are overwritten, and gradient tensors the op creates zeroed by the
// dispatcher, so those start blank. What the op writes is rounded back (nearest even) by narrow_results().
class Fp32Staging {
 public:
  Fp32Staging(const ModelSpec& spec, const OpSpec& op, const OpOperands& at) {
    const bool fwd = op.pass == Pass::Forward;
    std::vector<Slot> slots;
    for (size_t k = 0; k < at.inputs.size(); ++k) slots.push_back({0, k, tensor_numel(spec, op.inputs[k]), true, false});
    for (size_t k = 0; k < at.outputs.size(); ++k) {
      const int t = op.outputs[k];
      slots.push_back({1, k, tensor_numel(spec, t), !fwd && !created_grad(spec, op, t), true});
    }
    for (size_t k = 0; k < at.values.size(); ++k) slots.push_back({2, k, param_numel(spec, op.params[k]), true, false});
    if (!fwd)  // forward leaves gradients alone (and dispatch_op does not look at them)
      for (size_t k = 0; k < at.grads.size(); ++k) slots.push_back({3, k, param_numel(spec, op.params[k]), true, true});
    stage(at, slots);
  }

  OpOperands operands() const { return {lists_[0], lists_[1], lists_[2], lists_[3]}; }

  void narrow_results() const {
    for (const Staged& s : staged_)
      if (s.written) memory::narrow(s.stored.data, s.stored.dtype, s.fp32, s.n);
  }

 private:
  struct Slot {
    int list;  // inputs, outputs, values, grads
    size_t k;
    int64_t n;
    bool widen, written;
  };
  struct Staged {
    Operand stored;
    float* fp32;
    int64_t n;
    bool written;
  };

  static int64_t tensor_numel(const ModelSpec& spec, int t) { return numel(spec.tensors[t].shape); }
  static int64_t param_numel(const ModelSpec& spec, int p) { return numel(spec.params[p].shape); }
  static bool created_grad(const ModelSpec& spec, const OpSpec& op, int t) {
    if (!spec.tensors[t].is_grad) return false;
    for (int c : op.creates)
      if (c == t) return true;
    return false;
  }
  // Each copy starts on a cache line (the workspace itself is 64-byte aligned).
  static int64_t fp32_bytes(int64_t n) { return static_cast<int64_t>(memory::align_up(static_cast<size_t>(n) * sizeof(float), 64)); }

  // Copies every operand list, then points the 2-byte operands at fp32 copies carved from one workspace.
  void stage(const OpOperands& at, const std::vector<Slot>& slots) {
    const std::array<std::span<const Operand>, 4> given{at.inputs, at.outputs, at.values, at.grads};
    for (int l = 0; l < 4; ++l) lists_[l].assign(given[l].begin(), given[l].end());
    int64_t bytes = 0;
    for (const Slot& s : slots)
      if (two_byte(lists_[s.list][s.k])) bytes += fp32_bytes(s.n);
    auto* next = reinterpret_cast<std::byte*>(kernels::cpu::workspace(kernels::cpu::Scratch::Storage, bytes));
    for (const Slot& s : slots) {
      Operand& o = lists_[s.list][s.k];
      if (!two_byte(o)) continue;
      auto* fp32 = reinterpret_cast<float*>(next);
      next += fp32_bytes(s.n);
      if (s.widen) memory::widen(fp32, o.data, o.dtype, s.n);
      staged_.push_back({o, fp32, s.n, s.written});
      o = {reinterpret_cast<std::byte*>(fp32), DType::F32};
    }
  }

  std::array<std::vector<Operand>, 4> lists_;
  std::vector<Staged> staged_;
};

bool any_two_byte(const OpSpec& op, const OpOperands& at) {
  for (const auto* list : {&at.inputs, &at.outputs, &at.values})
    for (const Operand& o : *list)
      if (two_byte(o)) return true;
  if (op.pass == Pass::Backward)
    for (const Operand& o : at.grads)
      if (two_byte(o)) return true;
  return false;
}

}  // namespace

float run_cpu_op(const ModelSpec& spec, const OpSpec& op, const OpOperands& at, float loss_weight) {
  kernels::cpu::CpuKernels cpu;
  // fp32 (and int32) operands go to the kernels as they are: no copy, the fp32 path unchanged.
  if (!any_two_byte(op, at)) return dispatch_op(spec, op, at, loss_weight, cpu);
  op_compute_dtype(spec, op, at);  // refuses a bad mix of storage dtypes, naming the op, before any copy
  const Fp32Staging staged(spec, op, at);
  const float loss = dispatch_op(spec, op, staged.operands(), loss_weight, cpu);
  staged.narrow_results();
  return loss;
}

}  // namespace ferry::models
