// Executor: one pass over the schedule per micro-batch, queueing each action on its stream or on the CPU
// worker with the events it depends on; the host thread never waits inside a step, only at its end.
//
// Ordering rules (the Simulator's, made real):
// - A copy issued before op i waits for the compute stream to finish op i-1: the memory it writes may have
//   held a tensor that op i-1 was the last to use (the plan reuses space), and the gradients it reads
//   were last written by op i-1.
// - Wait b / ReleaseGrads b make the compute stream wait for b's arrival / its gradients' departure.
// - A prefetch also waits for the departure of gradients released at its own point: the window it fills
//   may lie where they were (their life ends where its begins), and op i-1 does not wait for the d2h stream.
// - AdamW on a bucket waits for its gradients to land, and (clipping, inf/nan check) for every bucket's
//   statistics: the statistics run as each bucket lands, the updates once the norm is known.
// - Micro-batches and steps are separated by a barrier (every stream and the CPU worker drained), except
//   with the pipelined update: a step then waits only for its compute stream and its decision, and the next
//   step's forward pass waits for the CPU updates bucket by bucket (InFlightUpdate); every other entry
//   point, and the barrier after the next step's first micro-batch, finishes them first.
#include "engine/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <utility>

#include "engine/device_bindings.h"
#include "engine/faults.h"
#include "engine/host_optimizer.h"
#include "engine/ops/op_dispatch.h"
#include "memory/convert.h"
#include "offload/simulator.h"

namespace ferry::engine {

using device::Stream;
using offload::Action;
using Region = memory::HostBuckets::Region;

namespace {

// One micro-batch's pass over the schedule: the events its actions order each other by.
struct MicroBatch {
  int index = 0;
  bool last = false;
  int point = 0;             // the schedule point whose actions are being queued
  // The compute stream has finished the op before point op_done_point: recorded only before the points whose
  // actions wait for it (a copy does; most points have none), not after every op.
  device::EventPtr op_done;
  int op_done_point = -1;
  std::vector<device::EventPtr> arrival, landed;
  std::vector<size_t> next_window;
};

// The labels of a bucket's actions, made once: a step queues them and builds none (faults match them).
struct ActionLabels {
  std::string gradients, leaving, zero_grads, sum_grads, prefetch, op_before_prefetch, last_step_adamw, before_landing,
      offload, adamw, upload, op_before_upload, uploaded;
  explicit ActionLabels(const std::string& bucket)
      : gradients("gradients of " + bucket), leaving("gradients of " + bucket + " leaving before a prefetch"),
        zero_grads("zero gradients of " + bucket), sum_grads("sum gradients of " + bucket),
        prefetch("prefetch " + bucket), op_before_prefetch("op before prefetch of " + bucket),
        last_step_adamw("last step's adamw of " + bucket),
        before_landing("prefetch of " + bucket + " before its gradients land on it"),
        offload("offload gradients of " + bucket), adamw("adamw of " + bucket), upload("upload " + bucket),
        op_before_upload("op before upload of " + bucket), uploaded("upload of " + bucket + " (last step's adamw)") {}
};

// What a step gathers while its actions are queued, and what the workers write before its barrier.
struct StepState {
  int64_t adam_step = 0;
  double lr = 0;
  float loss_scale = 1.0f;
  bool applying_pending = false;  // delayed: the previous step's update runs during this one
  std::vector<int> update_order;  // buckets in the order their gradients land in the last micro-batch
  std::vector<int> uploads;       // resident buckets to upload once updated (not delayed)
  bool device_adam = false;
  // The device tier beside the CPU's AdamW: its buckets and their statistics, which the host's decision reads.
  std::vector<device::Device::OptimizerBucket> device_tier;
  std::vector<cpu_optim::GradStats> device_tier_stats;
  std::vector<float> losses;
  cpu_optim::StepDecision device_decision;
  int64_t h2d_bytes = 0, d2h_bytes = 0;  // every copy is queued by the host thread
  double host_wait_s = 0;                // the host thread's time in barrier() and wait_for_results()
};

// Adds the seconds of its own lifetime to `total`: the host thread's waits.
class WaitTimer {
 public:
  explicit WaitTimer(double& total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~WaitTimer() { total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  WaitTimer(const WaitTimer&) = delete;
  WaitTimer& operator=(const WaitTimer&) = delete;

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_;
};

// The pipelined update of the last step (offload.overlap: pipelined), still running while the next step
// starts: what that step's ops wait for, bucket by bucket. Cleared by every barrier, which finishes it. Why
// waiting bucket by bucket keeps the update exact: docs/design.md, "The pipelined update is exact".
struct InFlightUpdate {
  std::vector<std::shared_ptr<device::HostEvent>> updated;  // per bucket: its update, until a prefetch or upload waited (null: none)
  std::vector<int> uploads;                                 // weights-resident buckets still to upload, in update order
  std::vector<device::EventPtr> uploaded;                   // per bucket: its upload, until the first op using it waited
  void clear(int n_buckets) { updated.assign(n_buckets, nullptr), uploads.clear(), uploaded.assign(n_buckets, nullptr); }
};

// Every op the step runs must be one its device runs, with its tensors stored as the plan binds them (each
// tensor's own dtype: the executor's plans are fp32 today). Refused before anything is queued, naming the op.
void check_device_runs_every_op(const models::ModelSpec& spec, const device::Device& device) {
  std::vector<DType> storage;
  for (const models::OpSpec& op : spec.ops) {
    storage.clear();
    for (const auto* list : {&op.inputs, &op.outputs})
      for (int t : *list) storage.push_back(spec.tensors[t].dtype);
    if (device.supports_op(storage, op.inputs.size())) continue;
    std::string types;
    for (DType t : storage) types += std::string(types.empty() ? "" : ", ") + to_string(t);
    throw std::invalid_argument(fmt::format("{} cannot run op {} ({}) with its tensors stored as [{}]", device.name(), op.name,
                                            models::to_string(op.kind), types));
  }
}

}  // namespace

struct Executor::Impl {
  const models::ModelSpec& spec;
  const offload::OffloadProblem& p;
  const offload::Schedule& s;
  memory::HostBuckets& host;
  device::Device& dev;
  const cpu_optim::CpuAdamW& adamw;
  const ExecutorOptions options;
  Faults faults;
  DeviceBindings at;
  const std::vector<std::vector<cpu_optim::HyperRange>> ranges;  // per bucket: its parameter groups' (empty: the plain update)
  HostOptimizer cpu;
  std::byte* batch_staging;          // pinned: tokens, targets and attention mask of one micro-batch
  int64_t tier_staging_size;         // bytes (tier_staging_bytes)
  std::byte* tier_staging;           // pinned: the device tier's state on its way to or from the device (none: null)
  std::vector<int32_t> no_padding;   // the attention mask of a batch without one
  StepState st;
  std::vector<int> update_rank;  // pipelined: per bucket, its place in the CPU's update order (offload::cpu_update_order)
  InFlightUpdate in_flight;
  std::vector<ActionLabels> labels;  // per bucket
  std::vector<bool> op_done_waited;  // per op: whether an action right after it waits for it (MicroBatch::op_done)
  // Per op: its call, decoded once (warm_up) and again only when the loss weight it was decoded with changes
  // (fp16's loss scale): the step's ops are the same every step, at the same addresses.
  std::vector<kernels::OpCall> calls;
  std::vector<float> call_weight;

  Impl(const models::ModelSpec& sp, const offload::StepPlan& plan, memory::HostBuckets& h, memory::PinnedHostPool& pool,
       device::Device& d, const cpu_optim::CpuAdamW& a, const ExecutorOptions& o, device::Trace* trace)
      : spec(sp), p(plan.problem), s(plan.schedule), host(h), dev(d), adamw(a), options(o),
        at(sp, plan, d.arena().data(), plan.memory.red_zone_bytes), ranges(checked_ranges(sp, plan.problem, o, a)),
        cpu(plan.problem, device_only_buckets(plan), h, pool, a, plan.schedule.delayed_update, o.grad_clip,
            at.bucket_labels(), ranges, faults, trace),
        batch_staging(pool.carve(batch_bytes(sp), 4096)), tier_staging_size(tier_staging_bytes(plan)),
        tier_staging(tier_staging_size > 0 ? pool.carve(tier_staging_size, 4096) : nullptr),
        update_rank(p.n_buckets, p.n_buckets) {
    const std::vector<int> order = offload::cpu_update_order(p, s);
    for (size_t i = 0; i < order.size(); ++i) update_rank[order[i]] = static_cast<int>(i);
    in_flight.clear(p.n_buckets);
    for (int b = 0; b < p.n_buckets; ++b) labels.emplace_back(at.bucket_label(b));
    op_done_waited.assign(p.n_ops, false);
    for (int t = 0; t < p.n_ops; ++t)
      for (const Action& a : s.before[t + 1]) op_done_waited[t] = op_done_waited[t] || waits_for_op_before(a);
  }

  // Whether `a` makes a copy wait for the compute stream's op before its point (prefetch, offload_grads, upload).
  bool waits_for_op_before(const Action& a) const {
    return a.kind == Action::Kind::Prefetch || a.kind == Action::Kind::OffloadGrads ||
           (a.kind == Action::Kind::Upload && delayed());
  }
  // The event after the op before the current point, for a copy to wait for (none at point 0).
  const device::EventPtr& op_before(const MicroBatch& mb) const {
    if (mb.point > 0 && mb.op_done_point != mb.point)
      throw std::logic_error(
          fmt::format("executor: no event was recorded after op {}, and an action at point {} waits for it",
                      mb.point - 1, mb.point));
    return mb.op_done;
  }

  static int64_t batch_bytes(const models::ModelSpec& spec) { return 3 * spec.tensors[spec.tensor_index("tokens")].bytes(); }
  // A few MiB, or less when the device tier is smaller: its state moves through them in chunks.
  static int64_t tier_staging_bytes(const offload::StepPlan& plan) {
    int64_t most = 0;
    const std::vector<bool> device_only = device_only_buckets(plan);
    for (int b = 0; b < plan.problem.n_buckets; ++b)
      if (device_only[b]) most = std::max(most, std::min(kTierStagingBytes, plan.problem.bucket_numel(b) * 4));
    return most;
  }

  // The per-bucket ranges of the options' parameter settings, which must freeze what the plan froze.
  static std::vector<std::vector<cpu_optim::HyperRange>> checked_ranges(const models::ModelSpec& spec, const offload::OffloadProblem& p,
                                                                          const ExecutorOptions& o, const cpu_optim::CpuAdamW& adamw) {
    if (o.params.empty()) return {};
    if (o.params.size() != spec.params.size())
      throw std::invalid_argument(fmt::format("executor: settings for {} parameters; the model has {}", o.params.size(), spec.params.size()));
    for (size_t i = 0; i < spec.params.size(); ++i)
      if (o.params[i].frozen != spec.params[i].frozen)
        throw std::logic_error(fmt::format("executor: parameter {} is {} in the settings and {} in the plan's model (mark the spec with "
                                           "engine::with_frozen before planning)",
                                           spec.params[i].name, o.params[i].frozen ? "frozen" : "trained", spec.params[i].frozen ? "frozen" : "trained"));
    return bucket_hyper_ranges(p.layout, o.params, adamw.hyper().weight_decay);
  }

  int64_t bytes(int b) const { return p.bucket_bytes[b]; }  // of its working copy and of its gradients
  bool delayed() const { return s.delayed_update; }
  bool pipelined() const { return s.pipelined_update; }
  bool grads_on_working() const { return host.grad_landing() == memory::HostBuckets::GradLanding::OnWorkingCopy; }

  // Queues a task on a stream, or in its place a failing one when a test injected a fault into it. (A template:
  // a std::function of the capturing lambda would be allocated for every op.)
  template <class QueueIt>
  void queue(Stream stream, std::string_view label, const QueueIt& queue_it) {
    if (faults.hits(label)) dev.run(stream, label, [] { throw std::runtime_error("injected fault"); });
    else queue_it();
  }
  void copy(Stream stream, void* dst, const void* src, int64_t n, std::string_view label) {
    (stream == Stream::H2D ? st.h2d_bytes : st.d2h_bytes) += n;
    queue(stream, label, [&] { dev.copy(stream, dst, src, n, label); });
  }
  void arm(Stream stream, int tensor) {
    if (at.has_red_zones()) dev.run(stream, "arm red zone", [this, tensor] { at.arm(tensor); });
  }
  // Waits for the CPU worker and every stream, even after a failure (queued tasks point into this
  // object), then throws the first failure. A pipelined update in flight is finished: uploads and all.
  void barrier() {
    queue_in_flight_uploads();
    const WaitTimer waiting(st.host_wait_s);
    std::string error;
    try {
      cpu.drain();
    } catch (const std::exception& e) {
      error = e.what();
    }
    try {
      dev.synchronize();
    } catch (const std::exception& e) {
      if (error.empty()) error = e.what();
    }
    in_flight.clear(p.n_buckets);
    if (!error.empty()) throw std::runtime_error(error);
  }

  void through_tier_staging(Stream stream, std::byte* device, int64_t n, DType t,
                            const std::function<void(std::byte* staged, int64_t begin, int64_t count)>& host_side);
  std::byte* device_tier_state(int param, Region r, int64_t first, int64_t count);
  void stage_batch(const dataset::Batch& batch);
  void warm_up();
  void run_micro_batch(const dataset::Batch& batch, MicroBatch& mb);
  float run_forward(const dataset::Batch& batch);
  void run_action(const Action& a, MicroBatch& mb);
  void run_op(int t, MicroBatch& mb);
  void finish_step();

  // One function per kind of action.
  void prefetch(int b, MicroBatch& mb);
  void offload_grads(int b, MicroBatch& mb);
  void gather_grads(int b, MicroBatch& mb);
  void upload(int b, MicroBatch& mb);
  void queue_upload(int b, const std::shared_ptr<device::HostEvent>& updated);
  void device_adam();
  void flush_pending();
  void queue_pipelined_updates();
  void queue_in_flight_uploads();
  void wait_for_results(const std::shared_ptr<device::HostEvent>& decided);
};

void Executor::Impl::stage_batch(const dataset::Batch& batch) {
  // Into staging now (the previous micro-batch's copies have finished), to the device in stream order.
  const int tokens = at.input_tensor("tokens"), targets = at.input_tensor("targets"), mask = at.input_tensor("attention_mask");
  const int64_t n = at.bytes(tokens);
  auto fits = [n](const std::vector<int32_t>& v) { return static_cast<int64_t>(v.size() * 4) == n; };
  if (!fits(batch.tokens) || !fits(batch.targets))
    throw std::invalid_argument(fmt::format("a micro-batch has {} tokens; the model step takes {}", batch.tokens.size(), n / 4));
  const std::vector<int32_t>& padding = batch.attention_mask.empty() ? no_padding : batch.attention_mask;
  if (mask >= 0 && !fits(padding)) throw std::invalid_argument("a micro-batch's attention mask has the wrong size");
  std::byte* staged = batch_staging;
  std::memcpy(staged, batch.tokens.data(), static_cast<size_t>(n));
  std::memcpy(staged + n, batch.targets.data(), static_cast<size_t>(n));
  copy(Stream::H2D, at.address(tokens), staged, n, "batch tokens");
  copy(Stream::H2D, at.address(targets), staged + n, n, "batch targets");
  if (mask >= 0) {
    std::memcpy(staged + 2 * n, padding.data(), static_cast<size_t>(n));
    copy(Stream::H2D, at.address(mask), staged + 2 * n, n, "batch attention mask");
  }
  dev.wait(Stream::Compute, dev.record(Stream::H2D), "batch");
}

// Every op of the step once, on a batch of token 0 and whatever the arena holds, before the first step:
// the device compiles its kernels and sizes its workspaces now, so that no step allocates. Nothing it
// writes survives: activations are rewritten and gradients zeroed before use, weights are only read.
void Executor::Impl::warm_up() {
  const int64_t tokens = at.bytes(at.input_tensor("tokens")) / 4;
  dataset::Batch zeros;
  zeros.tokens.assign(static_cast<size_t>(tokens), 0), zeros.targets.assign(static_cast<size_t>(tokens), 0);
  stage_batch(zeros);
  calls.clear(), call_weight.assign(p.n_ops, 1.0f);
  for (int t = 0; t < p.n_ops; ++t) {
    const DeviceBindings::Op& o = at.op(t);
    calls.push_back(ops::decode_op(spec, spec.ops[p.op_source[t]], {o.inputs, o.outputs, o.values, o.grads}, 1.0f));
    dev.run_op(calls.back(), nullptr, "warm-up: " + o.label);
  }
  barrier();
  st = StepState{};
}

void Executor::Impl::prefetch(int b, MicroBatch& mb) {
  const auto& windows = at.windows(b);
  if (mb.next_window[b] >= windows.size()) throw std::logic_error("more prefetches of " + at.bucket_label(b) + " than windows");
  const int w = windows[mb.next_window[b]++].tensor;
  if (grads_on_working() && mb.landed[b])
    throw std::logic_error("a prefetch of " + at.bucket_label(b) + " after its gradients landed on its working copy");
  if (const device::EventPtr& op = op_before(mb)) dev.wait(Stream::H2D, op, labels[b].op_before_prefetch);
  // The last step's pipelined update of b; its later prefetches follow this one on the in-order h2d stream.
  if (auto updated = std::exchange(in_flight.updated[b], nullptr))
    dev.wait(Stream::H2D, dev.from_host(updated), labels[b].last_step_adamw);
  for (const Action& a : s.before[mb.point])
    if (a.kind == Action::Kind::ReleaseGrads && mb.landed[a.bucket])
      dev.wait(Stream::H2D, mb.landed[a.bucket], labels[a.bucket].leaving);
  arm(Stream::H2D, w);
  copy(Stream::H2D, at.address(w), cpu.working(b), bytes(b), labels[b].prefetch);
  mb.arrival[b] = dev.record(Stream::H2D);
}

void Executor::Impl::offload_grads(int b, MicroBatch& mb) {
  if (const device::EventPtr& op = op_before(mb)) dev.wait(Stream::D2H, op, labels[b].gradients);
  // Gradients landing on the working copy overwrite it: every prefetch that reads it (the last of them, on the
  // in-order h2d stream) has finished first.
  if (grads_on_working() && mb.arrival[b]) dev.wait(Stream::D2H, mb.arrival[b], labels[b].before_landing);
  copy(Stream::D2H, cpu.landing(b), at.address(at.grads_tensor(b)), bytes(b), labels[b].offload);
  mb.landed[b] = dev.record(Stream::D2H);
}

void Executor::Impl::gather_grads(int b, MicroBatch& mb) {
  cpu.gather(b, dev, mb.landed[b], mb.index, mb.last);
  if (mb.last) st.update_order.push_back(b);
}

void Executor::Impl::queue_upload(int b, const std::shared_ptr<device::HostEvent>& updated) {
  dev.wait(Stream::H2D, dev.from_host(updated), labels[b].adamw);
  copy(Stream::H2D, at.address(at.resident_tensor(b)), cpu.updated_working(b), bytes(b), labels[b].upload);
}

void Executor::Impl::upload(int b, MicroBatch& mb) {
  if (!mb.last) return;
  if (!delayed()) {
    st.uploads.push_back(b);  // once its update is queued, after this step's last op
  } else if (st.applying_pending) {  // right after its last use in this step: the previous step's update
    if (const device::EventPtr& op = op_before(mb)) dev.wait(Stream::H2D, op, labels[b].op_before_upload);
    queue_upload(b, cpu.updated(b));
  }
}

void Executor::Impl::run_action(const Action& a, MicroBatch& mb) {
  const int b = a.bucket;
  switch (a.kind) {
    case Action::Kind::Prefetch: prefetch(b, mb); break;
    case Action::Kind::Wait: dev.wait(Stream::Compute, mb.arrival[b], at.bucket_label(b)); break;
    case Action::Kind::Release: break;  // its memory is reused only by later ops and by copies that wait for them
    case Action::Kind::OffloadGrads: offload_grads(b, mb); break;
    case Action::Kind::ReleaseGrads: dev.wait(Stream::Compute, mb.landed[b], labels[b].gradients); break;
    case Action::Kind::CpuAdam: gather_grads(b, mb); break;
    case Action::Kind::Upload: upload(b, mb); break;
    case Action::Kind::DeviceAdam: st.device_adam = true; break;
  }
}

void Executor::Impl::run_op(int t, MicroBatch& mb) {
  const DeviceBindings::Op& o = at.op(t);
  for (int b : p.op_buckets[t])  // the first use of a weights-resident bucket the last step's pipelined update uploads
    if (device::EventPtr uploaded = std::exchange(in_flight.uploaded[b], nullptr))
      dev.wait(Stream::Compute, uploaded, labels[b].uploaded);
  for (int b : o.zero_grads_before) {
    const int g = at.grads_tensor(b);
    arm(Stream::Compute, g);
    const std::string& label = labels[b].zero_grads;
    queue(Stream::Compute, label, [&] { dev.zero(Stream::Compute, at.address(g), at.bytes(g), label); });
  }
  for (int d : o.created) arm(Stream::Compute, d);
  const models::OpSpec& op = spec.ops[p.op_source[t]];
  const bool is_loss = op.kind == models::OpKind::CrossEntropy && op.pass == models::Pass::Forward;
  // The loss weight is the step's (fp16's loss scale changes it): an op decoded with another is decoded again.
  const float loss_weight = st.loss_scale / static_cast<float>(p.grad_accum);
  if (call_weight[t] != loss_weight)
    calls[t] = ops::decode_op(spec, op, {o.inputs, o.outputs, o.values, o.grads}, loss_weight),
    call_weight[t] = loss_weight;
  queue(Stream::Compute, o.label, [&] { dev.run_op(calls[t], is_loss ? &st.losses[mb.index] : nullptr, o.label); });
  if (at.has_red_zones())
    dev.run(Stream::Compute, "red zones of " + o.label, [this, &o] {
      for (int d : o.touched)
        if (std::string error = at.check(d); !error.empty()) throw std::runtime_error(error + " (by " + o.label + ")");
    });
  for (int b : o.sum_grads_after) {
    const std::string& label = labels[b].sum_grads;
    queue(Stream::Compute, label, [&] {
      dev.accumulate(Stream::Compute, at.floats(at.gradsum_tensor(b)), at.address(at.grads_tensor(b)), p.precision, p.bucket_numel(b),
                     mb.index == 0, label);
    });
  }
  if (op_done_waited[t]) mb.op_done = dev.record(Stream::Compute), mb.op_done_point = t + 1;
}

void Executor::Impl::run_micro_batch(const dataset::Batch& batch, MicroBatch& mb) {
  stage_batch(batch);
  queue_in_flight_uploads();  // behind the batch on the h2d stream, so that the first op need not wait for them
  mb.arrival.assign(p.n_buckets, nullptr), mb.landed.assign(p.n_buckets, nullptr), mb.next_window.assign(p.n_buckets, 0);
  for (int point = 0; point <= p.n_ops; ++point) {
    mb.point = point;
    for (const Action& a : s.before[point]) run_action(a, mb);
    if (point < p.n_ops) run_op(point, mb);
  }
  if (!mb.last) barrier();
}

// The step's timeline up to the loss, with only the copies that bring weights (prefetches and their waits):
// no gradient exists yet at those points, and nothing is uploaded before a bucket's last use.
float Executor::Impl::run_forward(const dataset::Batch& batch) {
  barrier();  // a pipelined update in flight: evaluation sees its weights
  st = StepState{};
  st.losses.assign(1, 0.0f);
  stage_batch(batch);
  MicroBatch mb;
  mb.last = true;
  mb.arrival.assign(p.n_buckets, nullptr), mb.landed.assign(p.n_buckets, nullptr), mb.next_window.assign(p.n_buckets, 0);
  for (int point = 0; point < p.n_ops; ++point) {
    mb.point = point;
    for (const Action& a : s.before[point])
      if (a.kind == Action::Kind::Prefetch || a.kind == Action::Kind::Wait) run_action(a, mb);
    run_op(point, mb);
    const models::OpSpec& op = spec.ops[p.op_source[point]];
    if (op.kind == models::OpKind::CrossEntropy && op.pass == models::Pass::Forward) break;
  }
  barrier();
  return st.losses[0];
}

// AdamW on the device's copy of the optimizer state, with the same kernels and the same order of reductions
// as on the CPU path, so that both give bitwise the same weights. Every bucket (policy resident): the
// device decides the step too. A device tier beside the CPU's AdamW: the device's statistics join the
// CPU's in the host's one decision, which the device's AdamW then waits for (finish_step).
void Executor::Impl::device_adam() {
  std::vector<device::Device::OptimizerBucket> buckets;
  std::vector<int> ids;
  for (int b = 0; b < p.n_buckets; ++b) {
    if (p.first_grad_op[b] < 0 || !s.device_optimizer[b]) continue;
    float* state = at.floats(at.state_tensor(b));
    const int64_t n = p.bucket_numel(b);
    const bool summed = at.gradsum_tensor(b) >= 0;  // fp32 sums over micro-batches
    const int grads = summed ? at.gradsum_tensor(b) : at.grads_tensor(b);
    buckets.push_back({state, state + n, state + 2 * n, at.address(grads), summed ? DType::F32 : p.precision,
                       at.address(at.resident_tensor(b)), p.precision, n, ranges.empty() ? std::vector<cpu_optim::HyperRange>() : ranges[b]});
    ids.push_back(b);
  }
  if (s.all_device_optimizer()) {
    constexpr std::string_view label = "adamw (device)";
    queue(Stream::Compute, label, [&] {
      dev.adamw(std::move(buckets), adamw.hyper(), st.adam_step, st.lr, options.grad_clip, st.loss_scale, &st.device_decision, label);
    });
    return;
  }
  st.device_tier_stats.assign(buckets.size(), {});
  st.device_tier = std::move(buckets);
  constexpr std::string_view label = "gradient statistics (device tier)";
  queue(Stream::Compute, label, [&] { dev.gradient_statistics(st.device_tier, st.device_tier_stats.data(), label); });
  cpu.record_device_stats(std::move(ids), st.device_tier_stats.data(), dev, dev.record(Stream::Compute));
}

void Executor::Impl::finish_step() {
  if (st.device_adam) device_adam();
  const bool device_tier = !st.device_tier.empty();
  std::shared_ptr<device::HostEvent> decided;
  if (!st.update_order.empty() || device_tier) decided = cpu.queue_decision();
  if (device_tier) {
    dev.wait(Stream::Compute, dev.from_host(decided), "step decision");
    constexpr std::string_view label = "adamw (device tier)";
    queue(Stream::Compute, label, [&] { dev.adamw_decided(st.device_tier, adamw.hyper(), st.adam_step, st.lr, cpu.decided(), label); });
  }
  if (!st.update_order.empty() && pipelined()) {
    queue_pipelined_updates();
    wait_for_results(decided);
    return;
  }
  if (!st.update_order.empty() && !delayed()) {
    cpu.queue_updates(st.update_order, st.adam_step, st.lr);
    for (int b : st.uploads) queue_upload(b, cpu.updated(b));
  }
  barrier();
  if (delayed()) cpu.end_delayed_step(st.adam_step, st.lr, st.update_order);
}

// The pipelined update: the CPU updates in the order the forward pass first uses the buckets (the order
// the next step needs them in), and the next step waits for each where it first needs it (InFlightUpdate).
// The uploads of the weights-resident buckets are queued once the next step's batch is (or by a barrier):
// the in-order h2d stream would otherwise hold the next step's batch, and so its first op, behind them.
void Executor::Impl::queue_pipelined_updates() {
  std::vector<int> order = st.update_order;
  std::stable_sort(order.begin(), order.end(), [this](int a, int b) { return update_rank[a] < update_rank[b]; });
  cpu.queue_updates(order, st.adam_step, st.lr);
  in_flight.clear(p.n_buckets);
  for (int b : order) {
    in_flight.updated[b] = cpu.updated(b);
    if (std::find(st.uploads.begin(), st.uploads.end(), b) == st.uploads.end()) continue;
    in_flight.uploads.push_back(b);
    st.h2d_bytes += bytes(b);  // counted in the step whose update they carry, as the Simulator counts them
  }
}

void Executor::Impl::queue_in_flight_uploads() {
  const int64_t counted = st.h2d_bytes;  // by queue_pipelined_updates, in the last step
  for (int b : in_flight.uploads) {
    queue_upload(b, in_flight.updated[b]);
    in_flight.uploaded[b] = dev.record(Stream::H2D);
  }
  st.h2d_bytes = counted;
  in_flight.uploads.clear();
}

// The pipelined step waits only for what it reports: the compute stream (its losses, the device tier's
// AdamW) and the decision (gradient norm, skipped). Every copy of the step is behind one or the other: the
// ops waited for the prefetches, the decision for the gradients' landing.
void Executor::Impl::wait_for_results(const std::shared_ptr<device::HostEvent>& decided) {
  const WaitTimer waiting(st.host_wait_s);
  try {
    dev.synchronize(dev.record(Stream::Compute));
    if (decided) HostOptimizer::wait(decided);
  } catch (const std::exception&) {
    barrier();  // drains every stream and the worker, then throws the first failure
    throw;
  }
}

void Executor::Impl::flush_pending() {
  barrier();  // a pipelined update in flight
  if (!cpu.has_pending()) return;
  cpu.queue_pending();
  for (int b : cpu.pending().order)
    if (at.resident_tensor(b) >= 0) queue_upload(b, cpu.updated(b));
  barrier();
  cpu.end_pending();
}

int64_t Executor::host_bytes_needed(const models::ModelSpec& spec, const offload::StepPlan& plan) {
  const int64_t tier = Impl::tier_staging_bytes(plan);
  return Impl::batch_bytes(spec) + 4096 + (tier > 0 ? tier + 4096 : 0) +
         HostOptimizer::bytes_needed(plan.problem, plan.schedule.delayed_update, device_only_buckets(plan));
}

std::vector<bool> Executor::device_only_buckets(const offload::StepPlan& plan) {
  std::vector<bool> device_only(plan.problem.n_buckets, false);
  for (int b = 0; b < plan.problem.n_buckets; ++b)
    device_only[b] = plan.schedule.device_optimizer[b] && plan.problem.first_grad_op[b] >= 0;
  return device_only;
}

// `n` elements of type t between host memory and the device, through the pinned staging in chunks: to the
// device (h2d), host_side fills each chunk before it goes; from it (d2h), host_side reads each chunk after it came.
void Executor::Impl::through_tier_staging(
    Stream stream, std::byte* device, int64_t n, DType t,
    const std::function<void(std::byte* staged, int64_t begin, int64_t count)>& host_side) {
  barrier();  // a step's copies and updates are done: the state is the step's
  const int64_t element = dtype_bytes(t), chunk = tier_staging_size / element;
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t count = std::min(chunk, n - begin);
    if (stream == Stream::H2D) host_side(tier_staging, begin, count);
    void* dst = stream == Stream::H2D ? static_cast<void*>(device + begin * element) : tier_staging;
    const void* src = stream == Stream::H2D ? static_cast<const void*>(tier_staging) : device + begin * element;
    dev.copy(stream, dst, src, count * element,
             stream == Stream::H2D ? "device tier: upload" : "device tier: download");
    dev.synchronize();
    if (stream == Stream::D2H) host_side(tier_staging, begin, count);
  }
}

// Where elements [first, first + count) of a parameter's master weights, m or v lie on the device, for a bucket the
// device alone keeps.
std::byte* Executor::Impl::device_tier_state(int param, Region r, int64_t first, int64_t count) {
  const memory::BucketLayout::Slot& slot = p.layout.slot(param);
  if (!host.on_device(slot.bucket) || !tier_staging)
    throw std::logic_error("executor: parameter " + spec.params[param].name +
                           " is not in a bucket the device alone keeps");
  if (first < 0 || first + count > slot.numel)
    throw std::logic_error(fmt::format("executor: values [{}, {}) of parameter {}, which has {}", first, first + count,
                                       spec.params[param].name, slot.numel));
  const int part = r == Region::Master ? 0 : r == Region::M ? 1 : r == Region::V ? 2 : -1;
  if (part < 0) throw std::logic_error("executor: the device tier's state is its master weights, m and v");
  return at.address(at.state_tensor(slot.bucket)) + (part * p.bucket_numel(slot.bucket) + slot.offset + first) * 4;
}

namespace {

// Why a plan's gradients cannot land on the working copies (empty: they can).
std::string gradients_need_their_own_region(const offload::StepPlan& plan) {
  if (plan.problem.compact_state) return "optim.state: compact keeps the weights in the working copies";
  if (plan.schedule.delayed_update)
    return "offload.overlap: delayed reads the working copies while the last step's gradients wait";
  if (plan.problem.grad_accum > 1)
    return fmt::format("train.grad_accum: {} reads the working copies in the micro-batch after gradients landed",
                       plan.problem.grad_accum);
  return "";
}

}  // namespace

memory::HostBuckets::GradLanding Executor::gradient_landing(const offload::StepPlan& plan) {
  return gradients_need_their_own_region(plan).empty() ? memory::HostBuckets::GradLanding::OnWorkingCopy
                                                       : memory::HostBuckets::GradLanding::OwnRegion;
}

Executor::Executor(const models::ModelSpec& spec, const offload::StepPlan& plan, memory::HostBuckets& host, memory::PinnedHostPool& pool,
                   device::Device& device, const cpu_optim::CpuAdamW& adamw, const ExecutorOptions& options, device::Trace* trace) {
  if (device.arena().size() < plan.memory.layout.peak)
    throw std::logic_error(fmt::format("the device arena holds {} bytes; the plan needs {}", device.arena().size(), plan.memory.layout.peak));
  if (plan.memory.red_zone_bytes > 0 && device.arena().backing() != memory::Arena::Backing::Host)
    throw std::invalid_argument("red zones are checked on the host device only");
  check_device_runs_every_op(spec, device);
  if (host.compact() && plan.schedule.any_device_optimizer())
    throw std::logic_error(
        "the compact optimizer state lives on the host, and the plan runs AdamW on the device for some bucket");
  const std::vector<bool> device_only = device_only_buckets(plan);
  for (int b = 0; b < plan.problem.n_buckets; ++b)
    if (host.on_device(b) && !device_only[b])
      throw std::logic_error(
          fmt::format("the host buckets leave bucket {} to the device, and the plan does not keep its state there: "
                      "make them with Executor::device_only_buckets(plan)",
                      b));
  if (const std::string why = gradients_need_their_own_region(plan);
      !why.empty() && host.grad_landing() == memory::HostBuckets::GradLanding::OnWorkingCopy)
    throw std::logic_error("the host buckets land gradients on the working copies, and " + why +
                           ": make them with Executor::gradient_landing(plan)");
  impl_ = std::make_unique<Impl>(spec, plan, host, pool, device, adamw, options, trace);
  Impl& x = *impl_;
  // The libraries' scratch lives in the plan's workspace (before the warm-up, whose ops use it).
  if (const int w = x.at.workspace_tensor(); w >= 0) device.bind_workspace(x.at.address(w), x.at.bytes(w));
  const int64_t token_bytes = spec.tensors[spec.tensor_index("tokens")].bytes();
  if (x.at.input_tensor("attention_mask") >= 0) x.no_padding.assign(static_cast<size_t>(token_bytes / 4), 1);
  x.warm_up();
}

Executor::~Executor() {
  try {
    impl_->barrier();
  } catch (const std::exception&) {
    // already reported by the step that failed
  }
}

void Executor::inject_fault(std::string label) { impl_->faults.label = std::move(label); }

void Executor::inject_delay(std::string label, std::chrono::microseconds delay) {
  impl_->faults.slow_label = std::move(label), impl_->faults.slow = delay;
}

void Executor::upload_state() {
  Impl& x = *impl_;
  x.barrier();    // a pipelined update in flight
  x.cpu.reset();  // the host buckets are the whole state now
  for (int b = 0; b < x.p.n_buckets; ++b) {
    if (x.host.on_device(b)) continue;  // its state is on the device already (write_device_tier)
    const std::string& name = x.at.bucket_label(b);
    if (x.at.resident_tensor(b) >= 0)
      x.copy(Stream::H2D, x.at.address(x.at.resident_tensor(b)), x.cpu.working(b), x.bytes(b), "upload " + name);
    if (const int state = x.at.state_tensor(b); state >= 0) {
      float* device_state = x.at.floats(state);
      const int64_t n = x.p.bucket_numel(b);
      x.copy(Stream::H2D, device_state, x.host.region(b, Region::Master).data, n * 4, "upload master " + name);
      x.copy(Stream::H2D, device_state + n, x.host.region(b, Region::M).data, n * 4, "upload m " + name);
      x.copy(Stream::H2D, device_state + 2 * n, x.host.region(b, Region::V).data, n * 4, "upload v " + name);
    }
  }
  x.barrier();
}

void Executor::download_state() {
  Impl& x = *impl_;
  for (int b = 0; b < x.p.n_buckets; ++b) {
    const int state = x.at.state_tensor(b);
    if (state < 0 || x.host.on_device(b)) continue;  // on the device only: read_device_tier
    const int64_t n = x.p.bucket_numel(b);
    const float* device_state = x.at.floats(state);
    const std::string& name = x.at.bucket_label(b);
    x.copy(Stream::D2H, x.host.region(b, Region::Master).data, device_state, n * 4, "download master " + name);
    x.copy(Stream::D2H, x.host.region(b, Region::M).data, device_state + n, n * 4, "download m " + name);
    x.copy(Stream::D2H, x.host.region(b, Region::V).data, device_state + 2 * n, n * 4, "download v " + name);
    x.copy(Stream::D2H, x.host.region(b, Region::Working).data, x.at.address(x.at.resident_tensor(b)), x.bytes(b), "download working " + name);
  }
  x.barrier();  // also finishes a pipelined update in flight: the host buckets then hold the step's state
}

void Executor::write_device_tier(int param, Region r, std::span<const float> values, int64_t first) {
  Impl& x = *impl_;
  const int64_t n = static_cast<int64_t>(values.size());
  std::byte* state = x.device_tier_state(param, r, first, n);
  x.through_tier_staging(Stream::H2D, state, n, DType::F32, [&](std::byte* staged, int64_t begin, int64_t count) {
    std::memcpy(staged, values.data() + begin, static_cast<size_t>(count) * 4);
  });
  if (r != Region::Master) return;
  // Its working copy, rounded from the master as the host's are (and as AdamW's fused copy-out writes them).
  const memory::BucketLayout::Slot& slot = x.p.layout.slot(param);
  std::byte* working =
      x.at.address(x.at.resident_tensor(slot.bucket)) + (slot.offset + first) * dtype_bytes(x.p.precision);
  x.through_tier_staging(Stream::H2D, working, n, x.p.precision, [&](std::byte* staged, int64_t begin, int64_t count) {
    memory::narrow(staged, x.p.precision, values.data() + begin, count);
  });
}

void Executor::read_device_tier(int param, Region r, std::span<float> out) {
  Impl& x = *impl_;
  const int64_t n = static_cast<int64_t>(out.size());
  if (n != x.p.layout.slot(param).numel)
    throw std::logic_error(fmt::format("executor: {} values read of parameter {}, which has {}", n,
                                       x.spec.params[param].name, x.p.layout.slot(param).numel));
  x.through_tier_staging(Stream::D2H, x.device_tier_state(param, r, 0, n), n, DType::F32,
                         [&](std::byte* staged, int64_t begin, int64_t count) {
                           std::memcpy(out.data() + begin, staged, static_cast<size_t>(count) * 4);
                         });
}

void Executor::zero_device_tier_moments(int param) {
  Impl& x = *impl_;
  const int64_t n = x.p.layout.slot(param).numel;
  for (Region r : {Region::M, Region::V}) {
    std::byte* state = x.device_tier_state(param, r, 0, n);
    x.barrier();
    x.dev.zero(Stream::Compute, state, n * 4, "device tier: zero moments");
    x.dev.synchronize();
  }
}

StepResult Executor::step(std::span<const dataset::Batch> micro_batches, int64_t adam_step, double lr, float loss_scale) {
  Impl& x = *impl_;
  const int M = static_cast<int>(micro_batches.size());
  if (M != x.p.grad_accum)
    throw std::invalid_argument(fmt::format("a step takes {} micro-batches (train.grad_accum); got {}", x.p.grad_accum, M));
  const double stall0 = x.dev.compute_stall_seconds();
  x.st = StepState{};
  x.st.adam_step = adam_step, x.st.lr = lr, x.st.loss_scale = loss_scale;
  x.st.losses.assign(M, 0.0f);
  // Delayed update: the previous step's AdamW runs on the CPU while this step computes.
  x.cpu.begin_step(loss_scale);
  x.st.applying_pending = x.delayed() && x.cpu.has_pending();
  if (x.st.applying_pending) x.cpu.queue_pending();
  for (int micro = 0; micro < M; ++micro) {
    MicroBatch mb;
    mb.index = micro, mb.last = micro == M - 1;
    x.run_micro_batch(micro_batches[micro], mb);
  }
  x.finish_step();

  StepResult r;
  double loss = 0;
  for (float l : x.st.losses) loss += l;
  r.loss = static_cast<float>(loss / M);
  const bool device_decided = x.st.device_adam && x.s.all_device_optimizer();
  const cpu_optim::StepDecision& d = device_decided ? x.st.device_decision : x.delayed() ? x.cpu.pending().decision() : x.cpu.decision();
  r.grad_norm = d.report.grad_norm;
  r.skipped = d.report.skipped;
  r.h2d_bytes = x.st.h2d_bytes, r.d2h_bytes = x.st.d2h_bytes;
  r.stall_s = x.dev.compute_stall_seconds() - stall0;
  r.host_wait_s = x.st.host_wait_s;
  return r;
}

void Executor::apply_pending_update() { impl_->flush_pending(); }

float Executor::evaluate(const dataset::Batch& batch) { return impl_->run_forward(batch); }

std::optional<Executor::PendingUpdate> Executor::pending_update() const {
  impl_->barrier();  // a pipelined update in flight is applied, never pending
  if (!impl_->cpu.has_pending()) return std::nullopt;
  const auto& u = impl_->cpu.pending();
  return PendingUpdate{u.adam_step, u.lr, u.decision()};
}

// The buckets the CPU updates (trained, not in the device tier, which the step that made the update has
// updated already), in backward's landing order; the updates are independent of it.
void Executor::set_pending_update(const PendingUpdate& update) {
  impl_->barrier();
  const offload::OffloadProblem& p = impl_->p;
  std::vector<int> order;
  for (int b = p.n_buckets - 1; b >= 0; --b)
    if (p.first_grad_op[b] >= 0 && !impl_->s.device_optimizer[b]) order.push_back(b);
  impl_->cpu.set_pending(update.adam_step, update.lr, update.decision, std::move(order));
}

memory::TensorView Executor::pending_gradients(int b) const { return impl_->cpu.pending_gradients(b); }

}  // namespace ferry::engine
