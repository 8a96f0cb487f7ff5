// The estimate counts what grows with the model and the batch; libraries, data and the program itself come
// on top (ferry-bench memory measures the whole: about 0.1-0.2 GB more at GPT-2 124M's shape).
#include "engine/host_memory.h"

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "engine/config.h"
#include "memory/host_buckets.h"
#include "memory/host_buffer.h"
#include "memory/planner.h"

namespace ferry::engine {

std::string HostMemoryEstimate::describe() const {
  std::string parts = fmt::format("host buckets {}, model copy {}, evaluation activations {}", memory::format_bytes(host_buckets),
                                  memory::format_bytes(model_copy), memory::format_bytes(evaluation));
  if (device_arena > 0) parts += ", host device arena " + memory::format_bytes(device_arena);
  return fmt::format("{} ({})", memory::format_bytes(total()), parts);
}

HostMemoryEstimate estimate_host_memory(const models::ModelSpec& spec, const offload::StepPlan& plan, bool host_device) {
  HostMemoryEstimate e;
  e.host_buckets = memory::HostBuckets::bytes_needed(plan.problem.layout, DType::F32, DType::F32);
  e.model_copy = 2 * spec.param_count() * 4;
  e.evaluation = memory::Planner::plan(spec.tensor_lifetimes()).peak;
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
