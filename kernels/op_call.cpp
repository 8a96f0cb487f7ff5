// run_call: the steps every backend takes around an op's launch.
#include "kernels/op_call.h"

#include <stdexcept>

namespace ferry::kernels {

float run_call(const OpCall& call, std::span<const Operand> operands, DType compute, OpKernels& kernels) {
  if (operands.size() != call.operands.size())
    throw std::logic_error("op " + call.name + ": run with " + std::to_string(operands.size()) +
                           " operands, decoded with " + std::to_string(call.operands.size()));
  if (!kernels.computes_in(compute))
    throw std::invalid_argument("op " + call.name + ": this device's kernels do not compute in " + to_string(compute));
  // Gradient tensors begin life here at zero: backward ops accumulate into them.
  for (size_t k = 0; k < operands.size(); ++k)
    if (call.operands[k].zeroed) kernels.zero(operands[k], call.operands[k].elements * dtype_bytes(operands[k].dtype));
  return call.launch(kernels, operands);
}

float run_call(const OpCall& call, OpKernels& kernels) {
  // The call's own operands, in a vector each thread keeps (every op of every step comes through here: none is
  // allocated per op). launch reads them before it returns, and no launch runs another call.
  thread_local std::vector<Operand> own;
  own.clear();
  for (const CallOperand& o : call.operands) own.push_back(o.at);
  return run_call(call, own, call.compute, kernels);
}

}  // namespace ferry::kernels
