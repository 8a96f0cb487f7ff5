// Simulator: validate walks the schedule's bucket states (no time involved); replay is a program-order
// event simulation of the valid schedule: each stream is FIFO, an action issued before op i is issued
// when the compute stream has finished op i-1, and micro-batches follow one another; the peak is the
// given DeviceMemory's.
#include "offload/simulator.h"

#include <algorithm>
#include <string>

#include "offload/stream_reuse.h"

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

const char* to_string(Tier tier) {
  switch (tier) {
    case Tier::Device: return "device";
    case Tier::WeightsResident: return "weights resident";
    case Tier::Streamed: return "streamed";
  }
  return "?";
}

namespace {

// Each bucket's state as the schedule leaves it, action by action, and what the next action may do.
class Validator {
 public:
  Validator(const OffloadProblem& p, const Schedule& s)
      : p_(p), s_(s), on_device_(s.resident), waited_(s.resident), prefetched_(p.n_buckets, false),
        offloaded_(p.n_buckets, false), updated_(p.n_buckets, false) {
    for (int b : cpu_update_order(p, s)) updated_[b] = true;
  }

  std::string run() {
    if (std::string what = check_tiers(); !what.empty()) return what;
    for (int point = 0; point <= p_.n_ops; ++point) {
      for (const Action& a : s_.before[point])
        if (std::string what = check(point, a); !what.empty()) return where(point, &a) + what;
      if (point == p_.n_ops) break;
      for (int b : p_.op_buckets[point])
        if (!on_device_[b] || !waited_[b])
          return where(point, nullptr) + "op " + std::to_string(point) + " uses bucket " + std::to_string(b) + " before it has arrived";
    }
    for (int b = 0; b < p_.n_buckets; ++b)
      if (p_.first_grad_op[b] >= 0 && !(s_.device_optimizer[b] ? device_adam_ : updated_[b]))
        return where(p_.n_ops, nullptr) + "bucket " + std::to_string(b) + " is never updated by AdamW" +
               (s_.device_optimizer[b] ? " (it is in the device tier and the schedule has no device-adam)" : "");
    return "";
  }

  // What is wrong with the tiers themselves; empty when nothing.
  std::string check_tiers() const {
    for (int b = 0; b < p_.n_buckets; ++b)
      if (s_.device_optimizer[b] && !s_.resident[b])
        return "bucket " + std::to_string(b) + " is in the device tier but not resident: its AdamW state needs its weights on the device";
    return "";
  }

 private:
  std::string where(int point, const Action* a) const {
    return (point < p_.n_ops ? "before op " + std::to_string(point) : std::string("after the last op")) +
           (a ? std::string(", ") + to_string(a->kind) + " of bucket " + std::to_string(a->bucket) : std::string()) + ": ";
  }

  // What is wrong with action a before op `point`, given what came before; empty when nothing.
  std::string check(int point, const Action& a) {
    const int b = a.bucket;
    if (a.kind == Action::Kind::DeviceAdam) {
      if (point != p_.n_ops) return "AdamW on the device runs after the last op, once every gradient is final";
      if (!s_.any_device_optimizer()) return "no bucket is in the device tier";
      device_adam_ = true;
      return "";
    }
    if (b < 0 || b >= p_.n_buckets) return "no such bucket";
    if (s_.device_optimizer[b])
      return "the bucket is in the device tier: its weights, gradients and AdamW stay on the device";
    switch (a.kind) {
      case Action::Kind::Prefetch:
        if (on_device_[b]) return "the bucket is already on the device";
        on_device_[b] = prefetched_[b] = true, waited_[b] = false;
        return "";
      case Action::Kind::Wait:
        if (!on_device_[b] || !prefetched_[b]) return "waits for a bucket that was never prefetched";
        waited_[b] = true;
        return "";
      case Action::Kind::Release:
        if (s_.resident[b] || !on_device_[b]) return "releases a bucket that is resident or not on the device";
        on_device_[b] = waited_[b] = false;
        return "";
      case Action::Kind::OffloadGrads:
        if (p_.last_grad_op[b] >= point) return "offloads gradients that op " + std::to_string(p_.last_grad_op[b]) + " has yet to write";
        offloaded_[b] = true;
        return "";
      case Action::Kind::ReleaseGrads: return offloaded_[b] ? "" : "releases gradients before offloading them";
      case Action::Kind::CpuAdam: return offloaded_[b] ? "" : "runs AdamW before the gradients are offloaded";
      case Action::Kind::Upload:
        if (!s_.resident[b]) return "uploads a bucket that has no resident slot";
        return updated_[b] ? "" : "uploads a bucket AdamW never updates";
      case Action::Kind::DeviceAdam: return "";
    }
    return "unknown action";
  }

  const OffloadProblem& p_;
  const Schedule& s_;
  std::vector<bool> on_device_, waited_, prefetched_, offloaded_, updated_;
  bool device_adam_ = false;
};

// What is wrong with `memory` as the layout of this schedule: it must hold exactly device_tensors().
std::string check_memory(const OffloadProblem& p, const Schedule& s, const DeviceMemory& memory) {
  const std::vector<DeviceTensor> expected = device_tensors(p, s);
  if (memory.tensors.size() != expected.size() || memory.layout.offsets.size() != expected.size())
    return "the device memory holds " + std::to_string(memory.tensors.size()) + " tensors (" +
           std::to_string(memory.layout.offsets.size()) + " offsets) but the schedule keeps " + std::to_string(expected.size()) +
           " on the device: it was laid out for another schedule";
  for (size_t i = 0; i < expected.size(); ++i) {
    const DeviceTensor &want = expected[i], &got = memory.tensors[i];
    if (want.kind != got.kind || want.index != got.index || want.life.bytes != got.life.bytes || want.life.first != got.life.first ||
        want.life.last != got.life.last)
      return "device tensor " + std::to_string(i) + " (" + to_string(want.kind) + " " + std::to_string(want.index) + ", ops " +
             std::to_string(want.life.first) + ".." + std::to_string(want.life.last) +
             ") differs in the device memory: it was laid out for another schedule";
  }
  return "";
}

// The timings of a valid schedule, written into a SimResult.
class Replay {
 public:
  Replay(const OffloadProblem& p, const Schedule& s, SimResult& r)
      : p_(p), s_(s), r_(r), order_(cpu_update_order(p, s)), arrival_(p.n_buckets, 0), grads_landed_(p.n_buckets, 0),
        updated_(p.n_buckets, 0) {}

  void run() {
    r_.stall_before_op.assign(p_.n_ops, 0.0);
    for (int b = 0; b < p_.n_buckets; ++b) (s_.resident[b] ? r_.resident_bytes : r_.offloaded_bytes) += p_.bucket_bytes[b];
    // Delayed: the previous step's updates are queued on the CPU when the step starts (steady state).
    // Pipelined: the step starts at the previous one's decision, with its device AdamW, CPU updates and
    // uploads still to run (steady state). Otherwise they wait for every bucket's statistics, and run
    // after the last op was issued.
    if (s_.delayed_update) queue_updates();
    if (s_.pipelined_update) previous_step_tail();
    // Micro-batches run one after another: between two, the Executor waits for every stream and the CPU.
    for (int micro = 0; micro < p_.grad_accum; ++micro) {
      last_micro_ = micro + 1 == p_.grad_accum;
      if (micro > 0) compute_ = h2d_ = d2h_ = cpu_ = std::max({compute_, h2d_, d2h_, cpu_});
      run_micro_batch();
    }
    const double last_op_done = compute_;
    // Global-norm clipping: no update starts before every bucket's statistics are in: the CPU's as its
    // gradients land, the device tier's at the end of backward (its pass is part of its AdamW's time).
    const double decided = std::max(compute_, cpu_);
    if (s_.pipelined_update) {  // the tail runs in the next step: previous_step_tail
      r_.step_s = decided;
      r_.lower_bound_s = std::max({r_.compute_busy_s, r_.h2d_busy_s, r_.d2h_busy_s, r_.cpu_busy_s});
      return;
    }
    if (device_adam_) compute_ = decided + device_adam_seconds();  // on the compute stream
    if (!updates_queued_) cpu_ = std::max(cpu_, decided);
    queue_updates();
    for (int b : uploads_after_updates_) upload(b, last_op_done);
    r_.step_s = std::max({compute_, h2d_, d2h_, cpu_});
    r_.lower_bound_s = std::max({r_.compute_busy_s, r_.h2d_busy_s, r_.d2h_busy_s, r_.cpu_busy_s});
  }

  // The op list once, with every action but the step's last ones (uploads, device AdamW) before the last
  // micro-batch. The stream times kept are the last micro-batch's: each repeats the same reuse.
  void run_micro_batch() {
    times_ = StreamTimes{};
    times_.op_start.assign(p_.n_ops, 0.0), times_.op_end.assign(p_.n_ops, 0.0);
    for (int point = 0; point <= p_.n_ops; ++point) {
      const double issue = compute_;
      double ready = compute_;  // when the next op may start
      for (const Action& a : s_.before[point]) act(a, point, issue, ready);
      if (point == p_.n_ops) break;
      if (s_.pipelined_update)  // a weights-resident bucket's first use waits for its upload (previous_step_tail)
        for (int b : p_.op_buckets[point])
          if (upload_pending_[b]) ready = std::max(ready, arrival_[b]), upload_pending_[b] = false;
      r_.stall_before_op[point] += ready - compute_;
      r_.stall_s += ready - compute_;
      times_.op_start[point] = ready;
      compute_ = times_.op_end[point] = ready + p_.op_seconds[point];
      r_.compute_busy_s += p_.op_seconds[point];
    }
    times_.grads_landed = grads_landed_;
  }

  // When the streams touched each device tensor (after run()).
  const StreamTimes& times() const { return times_; }

 private:
  // A prefetch may fill bytes that gradients released at the same point held: it waits until they have
  // left (as the Executor does).
  double released_grads_landed(int point) const {
    double t = 0;
    for (const Action& a : s_.before[point])
      if (a.kind == Action::Kind::ReleaseGrads) t = std::max(t, grads_landed_[a.bucket]);
    return t;
  }
  void act(const Action& a, int point, double issue, double& ready) {
    const int b = a.bucket;
    switch (a.kind) {
      case Action::Kind::Prefetch: {
        // Pipelined: the bucket's new weights exist once the previous step's update of it is done.
        const double earliest = std::max({issue, released_grads_landed(point), s_.pipelined_update ? updated_[b] : 0.0});
        times_.window_copy_start.push_back(std::max(earliest, h2d_));
        arrival_[b] = h2d_copy(b, earliest);
        break;
      }
      case Action::Kind::Wait: ready = std::max(ready, arrival_[b]); break;
      case Action::Kind::Release: break;
      case Action::Kind::OffloadGrads: {
        const double t = p_.cost.d2h.seconds(p_.bucket_bytes[b]);
        d2h_ = grads_landed_[b] = std::max(issue, d2h_) + t;
        r_.d2h_busy_s += t, r_.d2h_bytes += p_.bucket_bytes[b];
        break;
      }
      case Action::Kind::ReleaseGrads: ready = std::max(ready, grads_landed_[b]); break;
      case Action::Kind::CpuAdam: {
        // The statistics pass; with micro-batches also the fp32 sum of each one's gradients, costed alike.
        const int passes = p_.grad_accum > 1 && last_micro_ ? 2 : 1;
        const double t = passes * p_.bucket_params[b] / p_.cost.cpu_norm_params_per_s;
        cpu_ = std::max(grads_landed_[b], cpu_) + t;
        r_.cpu_busy_s += t;
        break;
      }
      case Action::Kind::Upload:
        if (!last_micro_ || s_.pipelined_update) break;  // pipelined: the next step's, in previous_step_tail
        if (updates_queued_) upload(b, issue);
        else uploads_after_updates_.push_back(b);  // issued once the updates are queued
        break;
      case Action::Kind::DeviceAdam: device_adam_ = last_micro_; break;  // after the last op, once the step is decided (run)
    }
  }
  // A copy of bucket b's working copy on the h2d stream, not before `earliest`; returns when it lands.
  double h2d_copy(int b, double earliest) {
    const double t = p_.cost.h2d.seconds(p_.bucket_bytes[b]);
    h2d_ = std::max(earliest, h2d_) + t;
    r_.h2d_busy_s += t, r_.h2d_bytes += p_.bucket_bytes[b];
    return h2d_;
  }
  void upload(int b, double issue) { h2d_copy(b, std::max(issue, updated_[b])); }
  // AdamW on the device tier's trained buckets (frozen ones are not updated), on the compute stream.
  double device_adam_seconds() {
    double params = 0;
    for (int b = 0; b < p_.n_buckets; ++b)
      if (s_.device_optimizer[b] && p_.first_grad_op[b] >= 0) params += double(p_.bucket_params[b]);
    const double t = params / p_.cost.device_adam_params_per_s;
    r_.compute_busy_s += t;
    return t;
  }
  // The pipelined update's steady state: the step starts at the previous step's decision, when the device
  // tier's AdamW takes the compute stream, the CPU updates its buckets in first-use order and each
  // weights-resident one is uploaded once updated (the h2d stream takes them first: they were issued at
  // the end of the previous step). Each bucket's first use in this step waits for them (act, run_micro_batch).
  void previous_step_tail() {
    if (s_.any_device_optimizer()) compute_ = device_adam_seconds();
    queue_updates();
    upload_pending_.assign(p_.n_buckets, false);
    for (int b : order_)
      if (s_.resident[b]) arrival_[b] = h2d_copy(b, updated_[b]), upload_pending_[b] = true;
  }
  void queue_updates() {
    if (updates_queued_) return;
    updates_queued_ = true;
    for (int b : order_) {
      const double t = p_.bucket_params[b] / p_.cpu_adam_params_per_s();
      cpu_ = updated_[b] = cpu_ + t;
      r_.cpu_busy_s += t;
    }
  }

  const OffloadProblem& p_;
  const Schedule& s_;
  SimResult& r_;
  const std::vector<int> order_;
  std::vector<double> arrival_, grads_landed_, updated_;
  std::vector<bool> upload_pending_;  // pipelined: a weights-resident bucket not yet used since its upload
  std::vector<int> uploads_after_updates_;
  bool updates_queued_ = false;
  bool last_micro_ = true;
  bool device_adam_ = false;
  double compute_ = 0, h2d_ = 0, d2h_ = 0, cpu_ = 0;  // when each stream is next free
  StreamTimes times_;
};

}  // namespace

std::vector<int> cpu_update_order(const OffloadProblem& p, const Schedule& s) {
  std::vector<int> order;
  for (const auto& actions : s.before)
    for (const Action& a : actions)
      if (a.kind == Action::Kind::CpuAdam && a.bucket >= 0 && a.bucket < p.n_buckets) order.push_back(a.bucket);
  return s.pipelined_update ? in_first_use_order(p, std::move(order)) : order;
}

std::vector<int> in_first_use_order(const OffloadProblem& p, std::vector<int> buckets) {
  std::vector<int> first_use(p.n_buckets, p.n_ops);
  for (int i = p.n_ops - 1; i >= 0; --i)
    for (int b : p.op_buckets[i]) first_use[b] = i;
  std::stable_sort(buckets.begin(), buckets.end(), [&](int a, int b) { return first_use[a] < first_use[b]; });
  return buckets;
}

std::string validate(const OffloadProblem& p, const Schedule& s, const DeviceMemory& memory) {
  if (static_cast<int>(s.before.size()) != p.n_ops + 1 || static_cast<int>(s.resident.size()) != p.n_buckets ||
      s.device_optimizer.size() != s.resident.size())
    return "the schedule has " + std::to_string(s.before.size()) + " action points and " + std::to_string(s.resident.size()) + " (" +
           std::to_string(s.device_optimizer.size()) + ") buckets; the problem " + std::to_string(p.n_ops + 1) + " and " +
           std::to_string(p.n_buckets);
  if (std::string what = Validator(p, s).run(); !what.empty()) return what;
  return check_memory(p, s, memory);
}

SimResult estimate(const OffloadProblem& p, const Schedule& s) {
  SimResult r;
  r.error = Validator(p, s).run();
  if (!r.error.empty()) return r;
  Replay(p, s, r).run();
  // The most bytes alive at one op (the loss's gradient over the logits counted once where the two meet).
  r.peak_device_bytes = memory::Planner::lower_bound(lifetimes(device_tensors(p, s)));
  r.fits = r.peak_device_bytes <= p.budget_bytes;
  return r;
}

SimResult simulate(const OffloadProblem& p, const Schedule& s, const DeviceMemory& memory) {
  SimResult r;
  r.error = validate(p, s, memory);
  if (!r.error.empty()) return r;
  Replay replay(p, s, r);
  replay.run();
  if (std::string unsafe = check_stream_reuse(memory, replay.times()); !unsafe.empty()) {
    SimResult invalid;
    invalid.error = std::move(unsafe);
    return invalid;
  }
  r.peak_device_bytes = memory.layout.peak;
  r.fits = r.peak_device_bytes <= p.budget_bytes;
  return r;
}

}  // namespace ferry::offload
