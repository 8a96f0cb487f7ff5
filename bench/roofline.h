// roofline: the least time a step's ops could take on a GPU (each op's FLOPs at the card's peak rate or its
// bytes at its memory bandwidth, whichever is longer), summed by op kind and pass beside what was measured.
// Pure functions, tested on the host (tests/engine/test_mfu.cpp): they order kernel work before a GPU session.
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/mfu.h"
#include "offload/cost_model.h"

namespace ferry::bench {

struct OpKindTime {
  std::string kind, pass;  // "Linear", "forward"
  int ops = 0;
  double seconds = 0;     // measured, summed over the step's ops of this kind and pass (0: not measured)
  double flops = 0;       // the ops' FLOPs
  double bytes = 0;       // the bytes they touch (offload::CostModel::op_bytes, attention fused)
  double roofline_s = 0;  // the sum of each op's roofline time on the peak (0: no peak known)
};

// The cost model whose op time is the roofline of `peak`: no per-op overhead, attention fused (a flash-style
// kernel writes no T x T probabilities).
inline offload::CostModel roofline_model(const PeakRate& peak) {
  offload::CostModel c;
  c.flops_per_s = peak.flops;
  c.memory_bytes_per_s = peak.bytes_per_s;
  c.op_overhead_s = 0;
  c.fused_attention = true;
  return c;
}

// The spec's ops summed by kind and pass, in decreasing measured time (or roofline time when nothing was
// measured). op_s: each op's measured seconds, or empty.
inline std::vector<OpKindTime> sum_by_kind(const models::ModelSpec& spec, const std::vector<double>& op_s,
                                           const std::optional<PeakRate>& peak) {
  const offload::CostModel model = roofline_model(peak.value_or(PeakRate{"", 1, 1}));
  std::map<std::pair<std::string, std::string>, OpKindTime> by;
  for (size_t i = 0; i < spec.ops.size(); ++i) {
    const models::OpSpec& op = spec.ops[i];
    const std::string pass = op.pass == models::Pass::Forward ? "forward" : "backward";
    OpKindTime& row = by[{models::to_string(op.kind), pass}];
    row.kind = models::to_string(op.kind), row.pass = pass;
    ++row.ops, row.flops += op.flops, row.bytes += model.op_bytes(spec, op);
    if (i < op_s.size()) row.seconds += op_s[i];
    if (peak) row.roofline_s += model.op_seconds(spec, op);
  }
  std::vector<OpKindTime> rows;
  for (auto& [key, row] : by) rows.push_back(row);
  std::sort(rows.begin(), rows.end(), [](const OpKindTime& a, const OpKindTime& b) {
    return a.seconds != b.seconds ? a.seconds > b.seconds : a.roofline_s > b.roofline_s;
  });
  return rows;
}

// Whether an op kind's roofline is set by its FLOPs ("compute") or its bytes ("memory") on the peak.
inline const char* roofline_bound(const OpKindTime& r, const PeakRate& peak) {
  return r.flops / peak.flops >= r.bytes / peak.bytes_per_s ? "compute" : "memory";
}

}  // namespace ferry::bench
