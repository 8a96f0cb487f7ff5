// check_stream_reuse: only the tensors a copy stream touches can break the Planner's reuse (the compute
// stream runs ops in order, so compute-only tensors with disjoint lives are safe by construction): a
// travelling window, first written by the h2d stream, and gradients, last read by the d2h stream. Each of
// those is checked against every tensor sharing its bytes.
#include "offload/stream_reuse.h"

#include <fmt/format.h>

#include <algorithm>

namespace ferry::offload {
namespace {

using Kind = DeviceTensor::Kind;

struct Access {
  double first_write = 0;  // when its first writer starts
  double last_end = 0;     // when its last reader or writer ends
};

std::vector<Access> accesses(const DeviceMemory& memory, const StreamTimes& t) {
  std::vector<Access> out(memory.tensors.size());
  const double step_end = t.op_end.empty() ? 0 : t.op_end.back();
  size_t window = 0;
  for (size_t i = 0; i < memory.tensors.size(); ++i) {
    const DeviceTensor& d = memory.tensors[i];
    Access& a = out[i];
    a.first_write = t.op_start[d.life.first], a.last_end = t.op_end[d.life.last];
    // device_tensors lists the travelling windows, in the order of their Prefetch, before any resident slot
    if (d.kind == Kind::Weights && window < t.window_copy_start.size()) a.first_write = t.window_copy_start[window++];
    else if (d.kind == Kind::Weights || d.kind == Kind::OptimizerState || d.kind == Kind::GradSum || d.kind == Kind::Workspace)
      a.first_write = 0, a.last_end = step_end;
    if (d.kind == Kind::Grads) a.last_end = std::max(a.last_end, t.grads_landed[d.index]);
  }
  return out;
}

std::string name(const DeviceTensor& d) {
  if (d.kind == Kind::Activation) return fmt::format("activation {} (ops {}..{})", d.index, d.life.first, d.life.last);
  if (d.kind == Kind::Workspace) return fmt::format("workspace (ops {}..{})", d.life.first, d.life.last);
  return fmt::format("{} of bucket {} (ops {}..{})", to_string(d.kind), d.index, d.life.first, d.life.last);
}

}  // namespace

std::string check_stream_reuse(const DeviceMemory& memory, const StreamTimes& times) {
  const std::vector<Access> access = accesses(memory, times);
  const auto& tensors = memory.tensors;
  auto end_of = [&](size_t i) { return memory.layout.offsets[i] + tensors[i].life.bytes + memory.red_zone_bytes; };
  for (size_t i = 0; i < tensors.size(); ++i) {
    const bool copied = tensors[i].kind == Kind::Weights || tensors[i].kind == Kind::Grads;
    if (!copied || tensors[i].life.bytes == 0) continue;
    for (size_t j = 0; j < tensors.size(); ++j) {
      const DeviceTensor &a = tensors[i], &b = tensors[j];
      if (j == i || b.life.bytes == 0 || memory.layout.offsets[j] >= end_of(i) || memory.layout.offsets[i] >= end_of(j)) continue;
      // earlier lies first in time; later takes its bytes
      const bool i_first = a.life.last < b.life.first;
      if (!i_first && !(b.life.last < a.life.first)) continue;  // co-live: the Planner's own check, not this one's
      const size_t earlier = i_first ? i : j, later = i_first ? j : i;
      if (access[later].first_write >= access[earlier].last_end) continue;
      const int64_t from = std::max(memory.layout.offsets[i], memory.layout.offsets[j]), to = std::min(end_of(i), end_of(j));
      return fmt::format("the {} is written at {:.6f} s into bytes [{}, {}) that the {} holds until {:.6f} s (a copy stream "
                         "still reads or writes them): the plan reuses memory before every stream is done with it",
                         name(tensors[later]), access[later].first_write, from, to, name(tensors[earlier]), access[earlier].last_end);
    }
  }
  return "";
}

}  // namespace ferry::offload
