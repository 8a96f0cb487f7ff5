// op_breakdown: the step's ops profiled one at a time and summed by kind and pass.
#include "bench/op_breakdown.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "engine/device/op_profile.h"

namespace ferry::bench {

std::vector<OpKindTime> op_breakdown(const models::ModelSpec& spec, int64_t vocab, device::DeviceChoice::Kind kind, int threads) {
  const auto dev = device::make_device({.kind = kind,
                                        .arena_bytes = device::profile_arena_bytes(spec, device::op_workspace_bytes(kind, spec)),
                                        .compute_threads = threads});
  const int64_t tokens = spec.tensors[spec.tensor_index("tokens")].bytes() / 4;
  std::vector<int32_t> ids(static_cast<size_t>(tokens));  // token ids spread over the vocabulary
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7919) % static_cast<size_t>(vocab));
  const std::vector<double> op_s = device::profile_ops(spec, *dev, ids, ids, {.min = 3, .min_seconds = 0.5});
  std::map<std::pair<std::string, std::string>, OpKindTime> by;
  for (size_t i = 0; i < spec.ops.size(); ++i) {
    const models::OpSpec& op = spec.ops[i];
    const std::string pass = op.pass == models::Pass::Forward ? "forward" : "backward";
    OpKindTime& row = by[{models::to_string(op.kind), pass}];
    row.kind = models::to_string(op.kind), row.pass = pass;
    ++row.ops, row.seconds += op_s[i], row.flops += op.flops;
  }
  std::vector<OpKindTime> rows;
  for (auto& [key, row] : by) rows.push_back(row);
  std::sort(rows.begin(), rows.end(), [](const OpKindTime& a, const OpKindTime& b) { return a.seconds > b.seconds; });
  return rows;
}

std::string op_breakdown_markdown(const std::vector<OpKindTime>& rows, double step_s) {
  double total = 0;
  for (const OpKindTime& r : rows) total += r.seconds;
  std::string out = fmt::format(
      "Where the time goes: every op profiled alone on the device (`device::profile_ops`, median of its passes), summed by kind: "
      "{:.1f} ms of ops against the {:.1f} ms step (the rest: launch gaps, waits, copies).\n\n"
      "| op kind | pass | ops | ms per step | share of the ops | TFLOP/s |\n|---|---|---|---|---|---|\n",
      total * 1e3, step_s * 1e3);
  for (const OpKindTime& r : rows)
    out += fmt::format("| {} | {} | {} | {:.2f} | {:.1f}% | {} |\n", r.kind, r.pass, r.ops, r.seconds * 1e3, 100 * r.seconds / total,
                       r.flops > 0 ? fmt::format("{:.3g}", r.flops / r.seconds / 1e12) : "-");
  return out;
}

nlohmann::json op_breakdown_json(const std::vector<OpKindTime>& rows) {
  nlohmann::json j = nlohmann::json::array();
  for (const OpKindTime& r : rows)
    j.push_back({{"kind", r.kind}, {"pass", r.pass}, {"ops", r.ops}, {"seconds", r.seconds}, {"flops", r.flops}});
  return j;
}

}  // namespace ferry::bench
