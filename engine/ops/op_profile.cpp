// profile_ops: one op's operands at a time in the arena, filled once by copies from host memory, then timed
// passes over the op list between timed events on the compute stream.
#include "engine/ops/op_profile.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>

#include "engine/ops/op_dispatch.h"
#include "engine/ops/op_workspace.h"
#include "memory/convert.h"
#include "memory/host_buffer.h"

namespace ferry::ops {
namespace {

using device::Device;
using device::EventPtr;
using device::Stream;

constexpr int64_t kAlign = 256;
int64_t aligned(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Where one op's operands sit in the arena (offsets from its start) and what each holds.
struct OpLayout {
  std::vector<kernels::Operand> inputs, outputs, values, grads;
  int64_t bytes = 0;
};

struct Slot {
  int64_t offset, bytes;
  DType dtype;
  std::string name;  // a tensor's name ("tokens", "targets", "attention_mask" get their own contents)
};

OpLayout lay_out_op(const models::ModelSpec& spec, const models::OpSpec& op, std::byte* base, std::vector<Slot>* slots) {
  OpLayout l;
  auto place = [&](int64_t bytes, DType dtype, const std::string& name) {
    const kernels::Operand o{base + l.bytes, dtype};
    if (slots) slots->push_back({l.bytes, bytes, dtype, name});
    l.bytes += aligned(bytes);
    return o;
  };
  for (int t : op.inputs) l.inputs.push_back(place(spec.tensors[t].bytes(), spec.tensors[t].dtype, spec.tensors[t].name));
  for (int t : op.outputs) l.outputs.push_back(place(spec.tensors[t].bytes(), spec.tensors[t].dtype, spec.tensors[t].name));
  const int64_t element = dtype_bytes(spec.precision);
  for (int p : op.params) {
    const int64_t bytes = models::numel(spec.params[p].shape) * element;
    l.values.push_back(place(bytes, spec.precision, spec.params[p].name));
    // Timed as the step runs it: a frozen parameter's backward has no gradient operand (no dW to compute).
    if (op.pass == models::Pass::Backward && !spec.params[p].frozen) l.grads.push_back(place(bytes, spec.precision, spec.params[p].name + ".grad"));
    else l.grads.push_back({nullptr, spec.precision});
  }
  return l;
}

// The contents of every slot, in host memory: token ids and targets from the batch, an attention mask of
// ones, small values elsewhere (no inf, nan or subnormal to take a slow path).
memory::HostBuffer contents(const std::vector<Slot>& slots, int64_t bytes, std::span<const int32_t> tokens,
                            std::span<const int32_t> targets) {
  memory::HostBuffer host(static_cast<size_t>(bytes));
  std::vector<float> values;
  for (const Slot& s : slots) {
    std::byte* at = host.data() + s.offset;
    if (s.dtype == DType::I32) {
      auto* ids = reinterpret_cast<int32_t*>(at);
      const auto n = static_cast<size_t>(s.bytes / 4);
      const std::span<const int32_t> from = s.name == "tokens" ? tokens : s.name == "targets" ? targets : std::span<const int32_t>{};
      if (!from.empty() && from.size() != n)
        throw std::invalid_argument("profile_ops: the sample batch has " + std::to_string(from.size()) + " tokens; the step takes " + std::to_string(n));
      for (size_t i = 0; i < n; ++i) ids[i] = from.empty() ? 1 : from[i];
      continue;
    }
    const int64_t n = s.bytes / dtype_bytes(s.dtype);
    values.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = 0.01f * static_cast<float>(i % 7 - 3) + 0.5f * (s.name.ends_with("rstd"));
    memory::narrow(at, s.dtype, values.data(), n);
  }
  return host;
}

// A key equal for ops that run the same kernels on operands of the same shapes: every block's ops repeat the
// first block's, so a model of 48 blocks profiles about one block's ops and the embeddings, head and loss.
std::string op_signature(const models::ModelSpec& spec, const models::OpSpec& op) {
  const models::OpAttrs& a = op.attrs;
  std::string key = std::to_string(static_cast<int>(op.kind)) + "/" + std::to_string(static_cast<int>(op.pass)) + "/" +
                    std::to_string(a.rows) + "," + std::to_string(a.in) + "," + std::to_string(a.out) + "," +
                    std::to_string(a.weight_out_in) + "," + std::to_string(a.batch) + "," + std::to_string(a.seq) +
                    "," + std::to_string(a.heads) + "," + std::to_string(a.kv_heads) + "," + std::to_string(a.causal) +
                    "," + std::to_string(a.exact_gelu) + "," + std::to_string(a.eps);
  auto shape = [&key](const models::Shape& sh) {
    for (int64_t d : sh) key += 'x' + std::to_string(d);
  };
  for (const std::vector<int>* list : {&op.inputs, &op.outputs})
    for (int t : *list) {
      const models::TensorSpec& ts = spec.tensors[t];
      key += "|t" + std::to_string(static_cast<int>(ts.dtype)) + (ts.is_input ? ts.name : "") + (ts.name.ends_with("rstd") ? "r" : "");
      shape(ts.shape);
    }
  for (int p : op.params) {
    key += std::string("|p") + (spec.params[p].frozen ? "f" : "");
    shape(spec.params[p].shape);
  }
  return key;
}

}  // namespace

std::vector<int> ops_profiled_in_place_of(const models::ModelSpec& spec) {
  std::map<std::string, int> first;
  std::vector<int> rep(spec.ops.size());
  for (size_t i = 0; i < spec.ops.size(); ++i) rep[i] = first.try_emplace(op_signature(spec, spec.ops[i]), static_cast<int>(i)).first->second;
  return rep;
}

double median_seconds(std::vector<double> v) {
  if (v.empty()) throw std::invalid_argument("median_seconds: no timed pass");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace {

// The step's op time from `samples` (each op's seconds, one per pass) over the passes from `first` in steps
// of `stride`: each op's median, times the ops it stands for.
double step_estimate(const std::vector<std::vector<double>>& samples, std::span<const int> weights, size_t first, size_t stride) {
  double total = 0;
  std::vector<double> picked;
  for (size_t k = 0; k < samples.size(); ++k) {
    picked.clear();
    for (size_t r = first; r < samples[k].size(); r += stride) picked.push_back(samples[k][r]);
    total += weights[k] * median_seconds(picked);
  }
  return total;
}

}  // namespace

std::vector<double> settled_op_seconds(std::span<const int> weights, const ProfilePasses& passes,
                                       const std::function<std::vector<double>()>& time_pass, int* ran) {
  std::vector<std::vector<double>> samples(weights.size());
  double timed_s = 0;
  int n = 0, agreed = 0;  // passes, and passes in a row after which the halves agreed
  while (n < std::max(passes.max, 1)) {
    const std::vector<double> pass = time_pass();
    if (pass.size() != weights.size())
      throw std::logic_error("settled_op_seconds: a pass timed " + std::to_string(pass.size()) + " ops of " + std::to_string(weights.size()));
    for (size_t k = 0; k < pass.size(); ++k) samples[k].push_back(pass[k]), timed_s += pass[k];
    ++n;
    if (timed_s >= passes.max_seconds) break;
    if (n < 2) continue;
    // Two halves that agree, twice in a row (once, a few slow passes can fall alike in both halves).
    const double odd = step_estimate(samples, weights, 1, 2), even = step_estimate(samples, weights, 0, 2);
    agreed = std::abs(odd - even) <= passes.tolerance * step_estimate(samples, weights, 0, 1) ? agreed + 1 : 0;
    if (agreed >= 2 && n >= passes.min && timed_s >= passes.min_seconds) break;
  }
  if (ran) *ran = n;
  std::vector<double> op_s(weights.size());
  for (size_t k = 0; k < samples.size(); ++k) op_s[k] = median_seconds(samples[k]);
  return op_s;
}

int64_t profile_arena_bytes(const models::ModelSpec& spec, int64_t workspace_bytes) {
  int64_t most = kAlign;
  for (const auto& op : spec.ops) most = std::max(most, lay_out_op(spec, op, nullptr, nullptr).bytes);
  return most + aligned(workspace_bytes);
}

std::vector<double> profile_ops(const models::ModelSpec& spec, Device& device, std::span<const int32_t> tokens,
                                std::span<const int32_t> targets, const ProfilePasses& passes) {
  std::byte* base = device.arena().data();
  const int64_t workspace = op_workspace_bytes(device.kind(), spec);
  if (device.arena().size() < profile_arena_bytes(spec, workspace))
    throw std::invalid_argument("profile_ops: the device arena holds " + std::to_string(device.arena().size()) +
                                " bytes, fewer than the largest op's operands and the device's workspace (" +
                                std::to_string(profile_arena_bytes(spec, workspace)) + ": profile_arena_bytes)");
  if (workspace > 0) device.bind_workspace(base + profile_arena_bytes(spec), workspace);  // after every op's operands
  const std::vector<int32_t> ones(tokens.size(), 1);
  const std::vector<int> rep = ops_profiled_in_place_of(spec);
  std::vector<size_t> timed;  // the ops timed, each for itself and the ops in its place
  std::vector<int> weights;
  std::vector<int> slot_of(spec.ops.size());  // an op's index in `timed`: its own, or its stand-in's
  std::vector<OpLayout> layouts;
  std::vector<std::vector<std::pair<int64_t, const int32_t*>>> ids;  // per timed op: its id slots
  for (size_t i = 0; i < spec.ops.size(); ++i) {
    if (rep[i] != static_cast<int>(i)) {  // timed once, as the first op of its signature
      slot_of[i] = slot_of[static_cast<size_t>(rep[i])];
      ++weights[static_cast<size_t>(slot_of[i])];
      continue;
    }
    slot_of[i] = static_cast<int>(timed.size());
    timed.push_back(i), weights.push_back(1);
    const models::OpSpec& op = spec.ops[i];
    std::vector<Slot> slots;
    layouts.push_back(lay_out_op(spec, op, base, &slots));
    ids.emplace_back();
    for (const Slot& slot : slots)
      if (slot.dtype == DType::I32)
        ids.back().emplace_back(slot.offset, slot.name == "tokens" ? tokens.data() : slot.name == "targets" ? targets.data() : ones.data());
    // The first pass (untimed: kernels compiled, workspaces sized) starts every op from small values.
    const memory::HostBuffer host = contents(slots, layouts.back().bytes, tokens, targets);
    device.wait(Stream::H2D, device.record(Stream::Compute), "profile: previous op");
    device.copy(Stream::H2D, base, host.data(), layouts.back().bytes, "profile: operands of " + op.name);
    device.wait(Stream::Compute, device.record(Stream::H2D), "profile: operands of " + op.name);
    const OpLayout& l = layouts.back();
    device.run_op(decode_op(spec, op, {l.inputs, l.outputs, l.values, l.grads}, 1.0f), nullptr,
                  "profile (warm-up): " + op.name);
    device.synchronize();  // `host` goes out of scope
  }
  // Timed passes: the ops share the arena, so each op's token ids and targets are copied in again (other
  // operands hold what earlier ops left: their values do not change an op's time).
  const int64_t id_bytes = static_cast<int64_t>(tokens.size() * 4);
  auto time_pass = [&] {
    std::vector<std::pair<EventPtr, EventPtr>> marks;  // each timed op's events
    for (size_t k = 0; k < timed.size(); ++k) {
      const OpLayout& l = layouts[k];
      if (!ids[k].empty()) {
        device.wait(Stream::H2D, device.record(Stream::Compute), "profile: previous op");
        for (const auto& [offset, from] : ids[k]) device.copy(Stream::H2D, base + offset, from, id_bytes, "profile: token ids");
        device.wait(Stream::Compute, device.record(Stream::H2D), "profile: token ids");
      }
      EventPtr before = device.record_timed(Stream::Compute);
      const models::OpSpec& op = spec.ops[timed[k]];
      device.run_op(decode_op(spec, op, {l.inputs, l.outputs, l.values, l.grads}, 1.0f), nullptr,
                    "profile: " + op.name);
      marks.emplace_back(std::move(before), device.record_timed(Stream::Compute));
    }
    std::vector<double> seconds;
    for (const auto& [before, after] : marks) seconds.push_back(device.elapsed_seconds(before, after));
    return seconds;
  };
  const std::vector<double> timed_s = settled_op_seconds(weights, passes, time_pass);
  device.synchronize();
  if (workspace > 0) device.bind_workspace(nullptr, 0);
  std::vector<double> op_s(spec.ops.size());
  for (size_t i = 0; i < spec.ops.size(); ++i) op_s[i] = timed_s[static_cast<size_t>(slot_of[i])];
  return op_s;
}

}  // namespace ferry::ops
