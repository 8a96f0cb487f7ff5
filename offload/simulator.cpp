// Simulator: program-order event simulation. Each stream is FIFO; an action issued before op i is issued
// when the compute stream has finished op i-1.
#include "offload/simulator.h"

#include <algorithm>
#include <string>

namespace ferry::offload {

const char* to_string(Action::Kind kind) {
  switch (kind) {
    case Action::Kind::Prefetch: return "prefetch";
    case Action::Kind::Wait: return "wait";
    case Action::Kind::Release: return "release";
    case Action::Kind::OffloadGrads: return "offload-grads";
    case Action::Kind::ReleaseGrads: return "release-grads";
    case Action::Kind::CpuAdam: return "cpu-adam";
    case Action::Kind::Upload: return "upload";
    case Action::Kind::DeviceAdam: return "device-adam";
  }
  return "?";
}

std::vector<DeviceTensor> device_tensors(const OffloadProblem& p, const Schedule& s) {
  using Kind = DeviceTensor::Kind;
  std::vector<DeviceTensor> out;
  for (size_t i = 0; i < p.activations.size(); ++i) out.push_back({Kind::Activation, static_cast<int>(i), p.activations[i]});
  const int last = p.n_ops - 1;
  std::vector<int> open_window(p.n_buckets, -1), grads_end(p.n_buckets, last);
  for (int point = 0; point <= p.n_ops; ++point) {
    for (const Action& a : s.before[point]) {
      if (a.kind == Action::Kind::Prefetch) {
        open_window[a.bucket] = static_cast<int>(out.size());
        const int first = std::min(point, last);
        out.push_back({Kind::Weights, a.bucket, {p.bucket_bytes[a.bucket], 256, first, last}});  // until released
      }
      if (a.kind == Action::Kind::Release && open_window[a.bucket] >= 0) {
        memory::TensorLifetime& life = out[open_window[a.bucket]].life;
        life.last = std::max(life.first, point - 1);
        open_window[a.bucket] = -1;
      }
      if (a.kind == Action::Kind::ReleaseGrads) grads_end[a.bucket] = std::max(p.first_grad_op[a.bucket], point - 1);
    }
  }
  for (int b = 0; b < p.n_buckets; ++b) {
    const int64_t numel = p.bucket_numel(b);
    if (s.resident[b]) out.push_back({Kind::Weights, b, {p.bucket_bytes[b], 256, 0, last}});
    if (p.first_grad_op[b] >= 0) out.push_back({Kind::Grads, b, {p.bucket_bytes[b], 256, p.first_grad_op[b], grads_end[b]}});
    if (s.optimizer_on_device) {
      out.push_back({Kind::OptimizerState, b, {3 * 4 * numel, 256, 0, last}});
      if (p.grad_accum > 1) out.push_back({Kind::GradSum, b, {4 * numel, 256, 0, last}});
    }
  }
  return out;
}

std::vector<memory::TensorLifetime> lifetimes(const std::vector<DeviceTensor>& tensors) {
  std::vector<memory::TensorLifetime> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back(t.life);
  return out;
}

SimResult simulate(const OffloadProblem& p, const Schedule& s) {
  SimResult r;
  r.stall_before_op.assign(p.n_ops, 0.0);
  const double never = -1;
  std::vector<double> arrival(p.n_buckets, never), grads_landed(p.n_buckets, never), updated(p.n_buckets, never);
  std::vector<bool> on_device(p.n_buckets), waited(p.n_buckets), offloaded(p.n_buckets);
  for (int b = 0; b < p.n_buckets; ++b) {
    on_device[b] = s.resident[b];
    waited[b] = s.resident[b];
    (s.resident[b] ? r.resident_bytes : r.offloaded_bytes) += p.bucket_bytes[b];
  }
  double compute = 0, h2d = 0, d2h = 0, cpu = 0;
  auto adam_s = [&](int b) { return p.bucket_params[b] / p.cost.cpu_adam_params_per_s; };
  std::vector<int> update_order;  // buckets in the order of their CpuAdam actions
  for (const auto& actions : s.before)
    for (const Action& a : actions)
      if (a.kind == Action::Kind::CpuAdam && a.bucket >= 0 && a.bucket < p.n_buckets) update_order.push_back(a.bucket);
  // Delayed: the previous step's updates are queued on the CPU when the step starts (steady state).
  if (s.delayed_update)
    for (int b : update_order) cpu = updated[b] = cpu + adam_s(b), r.cpu_busy_s += adam_s(b);
  // Otherwise the updates wait for every bucket's statistics, and run after the last op was issued.
  bool updates_queued = s.delayed_update;
  auto queue_updates = [&] {
    if (updates_queued) return;
    updates_queued = true;
    for (int b : update_order) cpu = updated[b] = cpu + adam_s(b), r.cpu_busy_s += adam_s(b);
  };
  std::vector<int> uploads_after_updates;
  auto fail = [&](int point, const Action* a, const std::string& what) {
    r.error = (point < p.n_ops ? "before op " + std::to_string(point) : std::string("after the last op")) +
              (a ? std::string(", ") + to_string(a->kind) + " of bucket " + std::to_string(a->bucket) : std::string()) +
              ": " + what;
  };
  auto upload = [&](int b, double issue) {
    const double start = std::max({issue, h2d, updated[b]}), t = p.cost.h2d.seconds(p.bucket_bytes[b]);
    h2d = start + t;
    r.h2d_busy_s += t, r.h2d_bytes += p.bucket_bytes[b];
  };
  for (int point = 0; point <= p.n_ops && r.error.empty(); ++point) {
    const double issue = compute;
    double ready = compute;  // when the next op may start
    for (const Action& a : s.before[point]) {
      const int b = a.bucket;
      if (a.kind != Action::Kind::DeviceAdam && (b < 0 || b >= p.n_buckets)) {
        fail(point, &a, "no such bucket");
        break;
      }
      switch (a.kind) {
        case Action::Kind::Prefetch: {
          if (on_device[b]) { fail(point, &a, "the bucket is already on the device"); break; }
          const double start = std::max(issue, h2d), t = p.cost.h2d.seconds(p.bucket_bytes[b]);
          h2d = arrival[b] = start + t;
          r.h2d_busy_s += t, r.h2d_bytes += p.bucket_bytes[b];
          on_device[b] = true, waited[b] = false;
          break;
        }
        case Action::Kind::Wait:
          if (!on_device[b] || arrival[b] == never) { fail(point, &a, "waits for a bucket that was never prefetched"); break; }
          ready = std::max(ready, arrival[b]);
          waited[b] = true;
          break;
        case Action::Kind::Release:
          if (s.resident[b] || !on_device[b]) { fail(point, &a, "releases a bucket that is resident or not on the device"); break; }
          on_device[b] = false, waited[b] = false;
          break;
        case Action::Kind::OffloadGrads: {
          if (p.last_grad_op[b] >= point) { fail(point, &a, "offloads gradients that op " + std::to_string(p.last_grad_op[b]) + " has yet to write"); break; }
          const double start = std::max(issue, d2h), t = p.cost.d2h.seconds(p.bucket_bytes[b]);
          d2h = grads_landed[b] = start + t;
          r.d2h_busy_s += t, r.d2h_bytes += p.bucket_bytes[b];
          offloaded[b] = true;
          break;
        }
        case Action::Kind::ReleaseGrads:
          if (!offloaded[b]) { fail(point, &a, "releases gradients before offloading them"); break; }
          ready = std::max(ready, grads_landed[b]);
          break;
        case Action::Kind::CpuAdam: {
          if (!offloaded[b]) { fail(point, &a, "runs AdamW before the gradients are offloaded"); break; }
          const double t = p.bucket_params[b] / p.cost.cpu_norm_params_per_s;  // the statistics pass
          cpu = std::max(grads_landed[b], cpu) + t;
          r.cpu_busy_s += t;
          break;
        }
        case Action::Kind::Upload: {
          if (!s.resident[b]) { fail(point, &a, "uploads a bucket that has no resident slot"); break; }
          if (std::find(update_order.begin(), update_order.end(), b) == update_order.end()) { fail(point, &a, "uploads a bucket AdamW never updates"); break; }
          if (!updates_queued) uploads_after_updates.push_back(b);  // issued once the updates are queued
          else upload(b, issue);
          break;
        }
        case Action::Kind::DeviceAdam: {
          const double t = p.total_params() / p.cost.device_adam_params_per_s;
          ready = std::max(ready, compute) + t;  // on the compute stream
          compute = ready;
          r.compute_busy_s += t;
          break;
        }
      }
      if (!r.error.empty()) break;
    }
    if (!r.error.empty() || point == p.n_ops) break;
    for (int b : p.op_buckets[point])
      if (!on_device[b] || !waited[b]) {
        fail(point, nullptr, "op " + std::to_string(point) + " uses bucket " + std::to_string(b) + " before it has arrived");
        break;
      }
    if (!r.error.empty()) break;
    r.stall_before_op[point] = ready - compute;
    r.stall_s += ready - compute;
    compute = ready + p.op_seconds[point];
    r.compute_busy_s += p.op_seconds[point];
  }
  if (r.error.empty()) {
    queue_updates();
    for (int b : uploads_after_updates) upload(b, compute);
  }
  if (r.error.empty() && !s.optimizer_on_device)
    for (int b = 0; b < p.n_buckets; ++b)
      if (p.first_grad_op[b] >= 0 && std::find(update_order.begin(), update_order.end(), b) == update_order.end()) {
        fail(p.n_ops, nullptr, "bucket " + std::to_string(b) + " is never updated by AdamW");
        break;
      }
  r.step_s = std::max({compute, h2d, d2h, cpu});
  r.lower_bound_s = std::max({r.compute_busy_s, r.h2d_busy_s, r.d2h_busy_s, r.cpu_busy_s});
  if (!r.error.empty()) return r;
  r.peak_device_bytes = memory::Planner::plan(lifetimes(device_tensors(p, s))).peak;
  r.fits = r.peak_device_bytes <= p.budget_bytes;
  return r;
}

}  // namespace ferry::offload
