// DeviceMemory: the device tensors a schedule implies (its Prefetch/Release pairs, resident slots,
// gradient buffers until ReleaseGrads, the device optimizer's state, the libraries' workspace) and their
// one layout.
#include "offload/device_memory.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace ferry::offload {

const char* to_string(DeviceTensor::Kind kind) {
  switch (kind) {
    case DeviceTensor::Kind::Activation: return "activation";
    case DeviceTensor::Kind::Weights: return "weights";
    case DeviceTensor::Kind::Grads: return "gradients";
    case DeviceTensor::Kind::OptimizerState: return "optimizer state";
    case DeviceTensor::Kind::GradSum: return "gradient sum";
    case DeviceTensor::Kind::Workspace: return "workspace";
  }
  return "?";
}

namespace {

using Kind = DeviceTensor::Kind;

// The travelling weight windows, each from its Prefetch to the op before its Release (to the last op when
// never released), and each bucket's last gradient op before its ReleaseGrads.
void add_windows(const OffloadProblem& p, const Schedule& s, std::vector<DeviceTensor>& out, std::vector<int>& grads_end) {
  const int last = p.n_ops - 1;
  std::vector<int> open_window(p.n_buckets, -1);
  for (int point = 0; point <= p.n_ops; ++point) {
    for (const Action& a : s.before[point]) {
      if (a.bucket < 0 || a.bucket >= p.n_buckets) continue;  // no such bucket: the Simulator's validate says so
      if (a.kind == Action::Kind::Prefetch) {
        open_window[a.bucket] = static_cast<int>(out.size());
        out.push_back({Kind::Weights, a.bucket, {p.bucket_bytes[a.bucket], 256, std::min(point, last), last}});
      }
      if (a.kind == Action::Kind::Release && open_window[a.bucket] >= 0) {
        memory::TensorLifetime& life = out[open_window[a.bucket]].life;
        life.last = std::max(life.first, point - 1);
        open_window[a.bucket] = -1;
      }
      if (a.kind == Action::Kind::ReleaseGrads) grads_end[a.bucket] = std::max(p.first_grad_op[a.bucket], point - 1);
    }
  }
}

}  // namespace

std::vector<DeviceTensor> device_tensors(const OffloadProblem& p, const Schedule& s) {
  if (static_cast<int>(s.before.size()) != p.n_ops + 1 || static_cast<int>(s.resident.size()) != p.n_buckets ||
      s.device_optimizer.size() != s.resident.size())
    throw std::invalid_argument(s.label() + ": the schedule has " + std::to_string(s.before.size()) + " action points and " +
                                std::to_string(s.resident.size()) + " buckets; the problem " + std::to_string(p.n_ops + 1) + " and " +
                                std::to_string(p.n_buckets));
  std::vector<DeviceTensor> out;
  for (size_t i = 0; i < p.activations.size(); ++i) out.push_back({Kind::Activation, static_cast<int>(i), p.activations[i]});
  const int last = p.n_ops - 1;
  std::vector<int> grads_end(p.n_buckets, last);
  add_windows(p, s, out, grads_end);
  for (int b = 0; b < p.n_buckets; ++b) {
    const int64_t numel = p.bucket_numel(b);
    if (s.resident[b]) out.push_back({Kind::Weights, b, {p.bucket_bytes[b], 256, 0, last}});
    if (p.first_grad_op[b] >= 0) out.push_back({Kind::Grads, b, {p.bucket_bytes[b], 256, p.first_grad_op[b], grads_end[b]}});
    if (s.device_optimizer[b] && p.first_grad_op[b] >= 0) {  // a bucket without gradients (frozen) is never updated
      out.push_back({Kind::OptimizerState, b, {3 * 4 * numel, 256, 0, last}});
      if (p.grad_accum > 1) out.push_back({Kind::GradSum, b, {4 * numel, 256, 0, last}});
    }
  }
  // Last, so that every other tensor keeps its index whether or not the device needs a workspace.
  if (p.workspace_bytes > 0) out.push_back({Kind::Workspace, 0, {p.workspace_bytes, 256, 0, last}});
  return out;
}

std::vector<memory::TensorLifetime> lifetimes(const std::vector<DeviceTensor>& tensors) {
  std::vector<memory::TensorLifetime> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back(t.life);
  return out;
}

DeviceMemory lay_out(const OffloadProblem& p, const Schedule& s, int64_t red_zone_bytes) {
  if (red_zone_bytes < 0)
    throw std::invalid_argument("red_zone_bytes: " + std::to_string(red_zone_bytes) + " is negative; use 0 for no red zones");
  DeviceMemory m{device_tensors(p, s), {}, red_zone_bytes};
  std::vector<memory::TensorLifetime> padded = lifetimes(m.tensors);
  for (auto& life : padded) life.bytes += red_zone_bytes;
  m.layout = memory::Planner::plan(padded);
  return m;
}

}  // namespace ferry::offload
