// The estimate counts what grows with the model and the batch; libraries, data and the program itself come
// on top (ferry-bench memory measures the whole: about 0.1-0.2 GB more at GPT-2 124M's shape).
#include "engine/host_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "engine/config.h"
#include "engine/executor.h"
#include "memory/host_buckets.h"
#include "memory/host_buffer.h"
#include "memory/planner.h"

namespace ferry::engine {

std::string HostMemoryEstimate::describe() const {
  std::string parts = fmt::format("host buckets {}", memory::format_bytes(host_buckets));
  if (op_scratch > 0) parts += ", host device op scratch " + memory::format_bytes(op_scratch);
  if (device_arena > 0) parts += ", host device arena " + memory::format_bytes(device_arena);
  return fmt::format("{} ({})", memory::format_bytes(total()), parts);
}

namespace {

// What the host device's ops hold beside the arena while the largest of them runs: fp32 copies of operands
// stored in 2 bytes (widened around the op), and the scratch of the two ops that keep a matrix of their
// own (the loss's softmax over the vocabulary, attention's score gradients).
int64_t host_op_scratch(const models::ModelSpec& spec) {
  int64_t most = 0;
  for (const models::OpSpec& op : spec.ops) {
    int64_t bytes = 0;
    for (const auto* list : {&op.inputs, &op.outputs})
      for (int t : *list)
        if (dtype_bytes(spec.tensors[t].dtype) == 2) bytes += models::numel(spec.tensors[t].shape) * 4;
    const bool backward = op.pass == models::Pass::Backward;
    if (dtype_bytes(spec.precision) == 2)
      for (int p : op.params) bytes += models::numel(spec.params[p].shape) * 4 * (backward ? 2 : 1);
    if (op.kind == models::OpKind::CrossEntropy) bytes += op.attrs.rows * op.attrs.in * 4;
    if (op.kind == models::OpKind::Attention && backward) bytes += op.attrs.batch * op.attrs.heads * op.attrs.seq * op.attrs.seq * 4;
    most = std::max(most, bytes);
  }
  return most;
}

}  // namespace

HostMemoryEstimate estimate_host_memory(const models::ModelSpec& spec, const offload::StepPlan& plan, bool host_device) {
  HostMemoryEstimate e;
  e.host_buckets = memory::HostBuckets::bytes_needed(
                       plan.problem.layout, plan.problem.precision, plan.problem.precision, plan.problem.compact_state,
                       Executor::gradient_landing(plan), Executor::device_only_buckets(plan)) +
                   Executor::host_bytes_needed(spec, plan);
  e.op_scratch = host_device ? host_op_scratch(spec) : 0;
  e.device_arena = host_device ? plan.memory.layout.peak : 0;
  return e;
}

int64_t available_host_memory() {
  if (const char* given = std::getenv("FERRY_HOST_MEMORY_AVAILABLE"); given && *given) {
    try {
      return parse_bytes(given);
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("FERRY_HOST_MEMORY_AVAILABLE: {}", e.what()));
    }
  }
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  return -1;
}

std::string host_memory_shortfall(const HostMemoryEstimate& estimate, int64_t needed, int64_t available) {
  if (available < 0 || needed <= available) return "";
  const std::string still = needed == estimate.total() ? "" : fmt::format("; the {} still to allocate is", memory::format_bytes(needed));
  return fmt::format("host memory: this run needs {}{} {} more than the {} available; train a smaller model or on a machine "
                     "with more memory{}",
                     estimate.describe(), still.empty() ? "," : still, memory::format_bytes(needed - available),
                     memory::format_bytes(available),
                     estimate.device_arena > 0 ? " (the host device's arena shrinks with offload.gpu_budget)" : "");
}

}  // namespace ferry::engine
