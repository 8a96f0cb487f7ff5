// run_on_cpu: an op call on the CPU whatever its operands' storage. Operands stored in bf16/fp16 are staged
// as fp32 in this thread's Storage workspace around the op (the one place the CPU widens and narrows an op's
// operands); fp32 and int32 ones are used in place.
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/workspace.h"
#include "memory/convert.h"
#include "memory/host_buffer.h"

namespace ferry::kernels::cpu {
namespace {

bool two_byte(Operand o) { return o.data && dtype_bytes(o.dtype) == 2; }

// Each copy starts on a cache line (the workspace itself is 64-byte aligned).
int64_t fp32_bytes(int64_t n) {
  return static_cast<int64_t>(memory::align_up(static_cast<size_t>(n) * sizeof(float), 64));
}

// The call's operands as the fp32 kernels take them: each 2-byte one pointed at an fp32 copy carved from one
// workspace. A copy starts from what the op reads (inputs, parameter values, what backward accumulates
// into), widened; the rest start blank (forward outputs are overwritten; gradient tensors the op creates are
// zeroed by run_call). What the op writes is rounded back (nearest even) by narrow_results().
class Fp32Staging {
 public:
  explicit Fp32Staging(const OpCall& call) : call_(call) {
    int64_t bytes = 0;
    for (const CallOperand& o : call.operands)
      if (two_byte(o.at)) bytes += fp32_bytes(o.elements);
    auto* next = reinterpret_cast<std::byte*>(workspace(Scratch::Storage, bytes));
    for (const CallOperand& o : call.operands) {
      if (!two_byte(o.at)) {
        operands_.push_back(o.at);
        continue;
      }
      auto* fp32 = reinterpret_cast<float*>(next);
      next += fp32_bytes(o.elements);
      if (o.read) memory::widen(fp32, o.at.data, o.at.dtype, o.elements);
      operands_.push_back({reinterpret_cast<std::byte*>(fp32), DType::F32});
    }
  }

  const std::vector<Operand>& operands() const { return operands_; }

  void narrow_results() const {
    for (size_t k = 0; k < operands_.size(); ++k) {
      const CallOperand& o = call_.operands[k];
      if (o.written && two_byte(o.at))
        memory::narrow(o.at.data, o.at.dtype, reinterpret_cast<const float*>(operands_[k].data), o.elements);
    }
  }

 private:
  const OpCall& call_;
  std::vector<Operand> operands_;
};

}  // namespace

float run_on_cpu(const OpCall& call) {
  CpuKernels kernels;
  bool staged = false;
  for (const CallOperand& o : call.operands) staged = staged || two_byte(o.at);
  // fp32 (and int32) operands go to the kernels as they are: no copy, the fp32 path unchanged.
  if (!staged) return run_call(call, kernels);
  const Fp32Staging fp32(call);
  const float loss = run_call(call, fp32.operands(), DType::F32, kernels);
  fp32.narrow_results();
  return loss;
}

}  // namespace ferry::kernels::cpu
