// op_breakdown: the step's ops profiled one at a time and summed by kind and pass (bench/roofline.h), as
// Markdown and JSON.
#include "bench/op_breakdown.h"

#include <fmt/format.h>

#include "engine/ops/op_profile.h"
#include "engine/ops/op_workspace.h"

namespace ferry::bench {
namespace {

double total_of(const std::vector<OpKindTime>& rows, double OpKindTime::*field) {
  double total = 0;
  for (const OpKindTime& r : rows) total += r.*field;
  return total;
}

std::string rate(double amount, double seconds, double unit) {
  return amount > 0 && seconds > 0 ? fmt::format("{:.3g}", amount / seconds / unit) : "-";
}

}  // namespace

std::vector<OpKindTime> op_breakdown(const models::ModelSpec& spec, int64_t vocab, device::DeviceChoice::Kind kind,
                                     int threads, const std::optional<PeakRate>& peak) {
  const auto dev =
      device::make_device({.kind = kind,
                           .arena_bytes = ops::profile_arena_bytes(spec, ops::op_workspace_bytes(kind, spec)),
                           .compute_threads = threads});
  const int64_t tokens = spec.tensors[spec.tensor_index("tokens")].bytes() / 4;
  std::vector<int32_t> ids(static_cast<size_t>(tokens));  // token ids spread over the vocabulary
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7919) % static_cast<size_t>(vocab));
  return sum_by_kind(spec, ops::profile_ops(spec, *dev, ids, ids, {.min = 3, .min_seconds = 0.5}), peak);
}

std::string op_breakdown_markdown(const std::vector<OpKindTime>& rows, double step_s,
                                  const std::optional<PeakRate>& peak) {
  const double total = total_of(rows, &OpKindTime::seconds);
  std::string out = fmt::format(
      "Where the time goes: every op profiled alone on the device (`ops::profile_ops`, median of its passes), "
      "summed by kind: {:.1f} ms of ops against the {:.1f} ms step (the rest: launch gaps, waits, copies).",
      total * 1e3, step_s * 1e3);
  if (peak)
    out += fmt::format(
        " Roofline: each op's FLOPs at {:.0f} TFLOP/s or its bytes at {:.2f} TB/s ({}), whichever is "
        "longer: {:.1f} ms for the step's ops; \"x roofline\" is the measured time over it.",
        peak->flops / 1e12, peak->bytes_per_s / 1e12, peak->name, total_of(rows, &OpKindTime::roofline_s) * 1e3);
  out += peak ? "\n\n| op kind | pass | ops | ms per step | share of the ops | TFLOP/s | GB/s | roofline ms | bound | "
                "x roofline |\n"
                "|---|---|---|---|---|---|---|---|---|---|\n"
              : "\n\n| op kind | pass | ops | ms per step | share of the ops | TFLOP/s | GB/s "
                "|\n|---|---|---|---|---|---|---|\n";
  for (const OpKindTime& r : rows) {
    out += fmt::format("| {} | {} | {} | {:.2f} | {:.1f}% | {} | {} |", r.kind, r.pass, r.ops, r.seconds * 1e3,
                       100 * r.seconds / total, rate(r.flops, r.seconds, 1e12), rate(r.bytes, r.seconds, 1e9));
    if (peak)
      out += fmt::format(" {:.3f} | {} | {:.1f} |", r.roofline_s * 1e3, roofline_bound(r, *peak),
                         r.roofline_s > 0 ? r.seconds / r.roofline_s : 0.0);
    out += "\n";
  }
  return out;
}

std::string roofline_markdown(const std::vector<OpKindTime>& rows, const PeakRate& peak) {
  const double total = total_of(rows, &OpKindTime::roofline_s);
  std::string out = fmt::format(
      "Roofline of the step's ops on {}: each op's FLOPs at {:.0f} TFLOP/s or its bytes at {:.2f} TB/s, whichever is "
      "longer, summed by kind: {:.2f} ms. No kernel can beat its row; a measured breakdown (`ferry-bench step "
      "--device cuda`) shows how far each is from it.\n\n"
      "| op kind | pass | ops | GFLOP | GB | roofline ms | bound | share |\n|---|---|---|---|---|---|---|---|\n",
      peak.name, peak.flops / 1e12, peak.bytes_per_s / 1e12, total * 1e3);
  for (const OpKindTime& r : rows)
    out += fmt::format("| {} | {} | {} | {:.1f} | {:.2f} | {:.3f} | {} | {:.1f}% |\n", r.kind, r.pass, r.ops,
                       r.flops / 1e9, r.bytes / 1e9, r.roofline_s * 1e3, roofline_bound(r, peak),
                       100 * r.roofline_s / total);
  return out;
}

nlohmann::json op_breakdown_json(const std::vector<OpKindTime>& rows) {
  nlohmann::json j = nlohmann::json::array();
  for (const OpKindTime& r : rows)
    j.push_back({{"kind", r.kind},
                 {"pass", r.pass},
                 {"ops", r.ops},
                 {"seconds", r.seconds},
                 {"flops", r.flops},
                 {"bytes", r.bytes},
                 {"roofline_s", r.roofline_s}});
  return j;
}

}  // namespace ferry::bench
