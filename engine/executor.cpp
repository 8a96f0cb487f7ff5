// Executor: one pass over the schedule per micro-batch, queueing each action on its stream or on the CPU
// worker with the events it depends on; the host thread never waits inside a step, only at its end.
//
// Ordering rules (the Simulator's, made real):
// - A copy issued before op i waits for the compute stream to finish op i-1: the memory it writes may have
//   held a tensor that op i-1 was the last to use (the Planner reuses space), and the gradients it reads
//   were last written by op i-1.
// - Wait b / ReleaseGrads b make the compute stream wait for b's arrival / its gradients' departure.
// - AdamW on a bucket waits for its gradients to land, and (clipping, inf/nan check) for every bucket's
//   statistics: the fused statistics pass runs as each bucket lands, the updates once the norm is known.
// - Micro-batches and steps are separated by a barrier (every stream and the CPU worker drained).
#include "engine/executor.h"

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>

#include "engine/device/work_queue.h"
#include "memory/host_buffer.h"

namespace ferry::engine {

using offload::Action;
using offload::DeviceTensor;

struct Executor::Impl {
  const models::ModelSpec& spec;
  const offload::OffloadProblem& p;
  const offload::Schedule& s;
  memory::HostBuckets& host;
  device::Device& dev;
  const cpu_optim::CpuAdamW& adamw;
  ExecutorOptions options;
  device::Trace* trace;
  std::string fault;  // tests only: tasks whose label contains it fail instead of running

  const offload::DeviceMemory& device_memory;  // the plan's device tensors and their offsets
  std::byte* arena = nullptr;
  struct Window {
    int first, last;
    int64_t offset;
  };
  std::vector<std::vector<Window>> windows;  // per bucket, in the order of its Prefetch actions
  std::vector<int64_t> resident_offset, grads_offset, state_offset, gradsum_offset;  // per bucket; -1: none
  std::vector<int64_t> activation_offset;
  std::vector<std::vector<int>> entries_of_tensor;  // spec tensor -> its activation entries

  // Per timeline op: where its operands are, what it is called, and the gradient buffers to zero before
  // it (its bucket's first gradient op) and to sum after it (its bucket's last, device optimizer only).
  struct OpBinding {
    std::string label;
    std::vector<std::byte*> inputs, outputs;  // as op.inputs / op.outputs
    std::vector<float*> values, grads;        // as op.params
    std::vector<int> zero_grads_before, sum_grads_after;
  };
  std::vector<OpBinding> ops;
  std::vector<std::string> bucket_label;

  memory::HostBuffer batch_staging;  // tokens then targets of one micro-batch
  memory::HostBuffer grad_staging;   // CPU AdamW with grad_accum > 1: later micro-batches land here
  std::vector<int64_t> staging_offset;
  int tokens_tensor = -1, targets_tensor = -1, mask_tensor = -1;  // mask: BERT's attention_mask (-1: none)
  std::vector<int32_t> no_padding;  // the mask of a batch without one

  // Host copies that CPU AdamW reads and writes. Without the delayed update: the buckets' Grad and
  // Working regions. With it, two of each, so that one step's gradients land and its prefetches read
  // while AdamW applies the previous step's: gradients alternate by step, working copies are swapped
  // once a step's updates are in.
  std::vector<float*> grad_land[2];
  std::vector<float*> working_now, working_next, working_spare;  // spare: working_alt's slices
  memory::HostBuffer grad_alt, working_alt;
  int parity = 0;  // which gradient landing region this step uses
  struct Pending {  // the delayed update not yet applied
    bool has = false;
    int64_t adam_step = 0;
    double lr = 0;
    cpu_optim::StepDecision decision;
    std::vector<int> order;
    int parity = 0;
  } pending;
  std::vector<std::shared_ptr<device::HostEvent>> updated;  // per bucket: CPU AdamW has written its new working copy

  // Written by the workers during a step, read by the host thread after its barrier.
  std::vector<float> losses;
  std::vector<cpu_optim::GradStats> stats;
  cpu_optim::StepDecision decision;         // of this step's gradients
  cpu_optim::StepDecision update_decision;  // of the gradients the queued updates apply
  float loss_scale = 1.0f;                  // of this step
  int64_t h2d_bytes = 0, d2h_bytes = 0;  // queued this step (every copy is queued by the host thread)

  std::unique_ptr<device::WorkQueue> cpu;  // CPU AdamW; declared last: drained and joined first

  Impl(const models::ModelSpec& sp, const offload::StepPlan& sp_plan, memory::HostBuckets& h, device::Device& d,
       const cpu_optim::CpuAdamW& a, const ExecutorOptions& o, device::Trace* t)
      : spec(sp), p(sp_plan.problem), s(sp_plan.schedule), host(h), dev(d), adamw(a), options(o), trace(t), device_memory(sp_plan.memory) {}

  int64_t numel(int b) const { return p.bucket_numel(b); }
  int64_t bytes(int b) const { return numel(b) * 4; }
  float* at(int64_t offset) const { return reinterpret_cast<float*>(arena + offset); }
  bool faulty(const std::string& label) const { return !fault.empty() && label.find(fault) != std::string::npos; }

  // Tests: queues a failing task in place of the one named `label`, and says so.
  bool inject(device::Stream stream, const std::string& label) {
    if (!faulty(label)) return false;
    dev.run(stream, label, [] { throw std::runtime_error("injected fault"); });
    return true;
  }
  void copy(device::Stream stream, void* dst, const void* src, int64_t n, std::string label) {
    (stream == device::Stream::H2D ? h2d_bytes : d2h_bytes) += n;
    if (!inject(stream, label)) dev.copy(stream, dst, src, n, std::move(label));
  }
  void cpu_run(std::string label, std::function<void()> work) {
    if (faulty(label)) work = [] { throw std::runtime_error("injected fault"); };
    cpu->run(std::move(label), std::move(work));
  }

  void layout();
  void bind_ops();
  // Waits for the CPU worker and every stream, even after a failure (queued tasks point into this
  // object), then throws the first failure.
  void barrier() {
    std::string error;
    try {
      cpu->drain();
    } catch (const std::exception& e) {
      error = e.what();
    }
    try {
      dev.synchronize();
    } catch (const std::exception& e) {
      if (error.empty()) error = e.what();
    }
    if (!error.empty()) throw std::runtime_error(error);
  }
  float* host_region(int b, memory::HostBuckets::Region r) const { return host.region(b, r).as<float>(); }
  void device_adam(int64_t adam_step, double lr);
  // Queues CPU AdamW on `order`'s buckets with the gradients of landing region `grads`, under
  // update_decision (set by the time the first update runs); each bucket's `updated` event follows.
  void queue_updates(const std::vector<int>& order, int grads, int64_t adam_step, double lr);
  // Queues the upload of resident bucket b's new working copy once CPU AdamW has written it.
  void queue_upload(int b) {
    dev.wait(device::Stream::H2D, dev.from_host(updated[b]), "adamw of " + bucket_label[b]);
    copy(device::Stream::H2D, at(resident_offset[b]), delayed() ? working_next[b] : working_now[b], bytes(b), "upload " + bucket_label[b]);
  }
  bool delayed() const { return s.delayed_update; }
  // Delayed update: applies the pending one now (before reading the host's weights, and at sync steps).
  void flush();
  void swap_working(const std::vector<int>& order) {
    for (int b : order) std::swap(working_now[b], working_next[b]);
  }
};

void Executor::Impl::queue_updates(const std::vector<int>& order, int grads, int64_t adam_step, double lr) {
  using R = memory::HostBuckets::Region;
  for (int b : order) {
    cpu_run("adamw " + bucket_label[b], [this, b, grads, adam_step, lr] {
      const size_t n = static_cast<size_t>(numel(b));
      float* out = delayed() ? working_next[b] : working_now[b];
      if (update_decision.report.skipped) {
        if (delayed()) std::memcpy(out, working_now[b], n * 4);  // the next working copy is the current one
        return;
      }
      float* master = host_region(b, R::Master);
      adamw.step({{master, n}, {host_region(b, R::M), n}, {host_region(b, R::V), n}, grad_land[grads][b], DType::F32},
                 adam_step, lr, update_decision.grad_scale);
      std::memcpy(out, master, n * 4);  // the fp32 working copy
    });
    updated[b] = cpu->record();
  }
}

void Executor::Impl::flush() {
  if (!pending.has) return;
  update_decision = pending.decision;
  queue_updates(pending.order, pending.parity, pending.adam_step, pending.lr);
  for (int b : pending.order)
    if (resident_offset[b] >= 0) queue_upload(b);
  barrier();
  swap_working(pending.order);
  pending.has = false;
}

void Executor::Impl::layout() {
  const auto& tensors = device_memory.tensors;
  if (dev.arena().size() < device_memory.layout.peak)
    throw std::logic_error(
        fmt::format("the device arena holds {} bytes; the plan needs {}", dev.arena().size(), device_memory.layout.peak));
  arena = dev.arena().data();
  windows.assign(p.n_buckets, {});
  resident_offset.assign(p.n_buckets, -1), grads_offset.assign(p.n_buckets, -1);
  state_offset.assign(p.n_buckets, -1), gradsum_offset.assign(p.n_buckets, -1);
  activation_offset.assign(p.activations.size(), -1);
  entries_of_tensor.assign(spec.tensors.size(), {});
  for (size_t i = 0; i < tensors.size(); ++i) {
    const DeviceTensor& t = tensors[i];
    const int64_t offset = device_memory.layout.offsets[i];
    switch (t.kind) {
      case DeviceTensor::Kind::Activation:
        activation_offset[t.index] = offset;
        entries_of_tensor[p.activation_tensor[t.index]].push_back(t.index);
        break;
      case DeviceTensor::Kind::Weights:
        if (s.resident[t.index]) resident_offset[t.index] = offset;
        else windows[t.index].push_back({t.life.first, t.life.last, offset});
        break;
      case DeviceTensor::Kind::Grads: grads_offset[t.index] = offset; break;
      case DeviceTensor::Kind::OptimizerState: state_offset[t.index] = offset; break;
      case DeviceTensor::Kind::GradSum: gradsum_offset[t.index] = offset; break;
    }
  }
}

void Executor::Impl::bind_ops() {
  const auto& layout = p.layout;
  for (int b = 0; b < p.n_buckets; ++b) {
    const auto& params = layout.buckets()[b].params;
    bucket_label.push_back(fmt::format("bucket {} ({}{})", b, spec.params[params.front()].name,
                                       params.size() > 1 ? " .. " + spec.params[params.back()].name : ""));
  }
  auto activation_at = [&](int tensor, int t) -> std::byte* {
    for (int e : entries_of_tensor[tensor])
      if (p.activations[e].first <= t && t <= p.activations[e].last) return arena + activation_offset[e];
    throw std::logic_error("tensor " + spec.tensors[tensor].name + " is not alive at op " + std::to_string(t));
  };
  auto weights_at = [&](int b, int t) -> int64_t {
    if (resident_offset[b] >= 0) return resident_offset[b];
    for (const Window& w : windows[b])
      if (w.first <= t && t <= w.last) return w.offset;
    throw std::logic_error(bucket_label[b] + " is not on the device at op " + std::to_string(t));
  };
  ops.resize(p.n_ops);
  for (int t = 0; t < p.n_ops; ++t) {
    const models::OpSpec& op = spec.ops[p.op_source[t]];
    OpBinding& bind = ops[t];
    std::string buckets;
    for (int b : p.op_buckets[t]) buckets += (buckets.empty() ? "" : ", ") + std::to_string(b);
    bind.label = op.name + (p.op_recompute[t] ? " (recompute)" : "") + (buckets.empty() ? "" : " [bucket " + buckets + "]");
    for (int x : op.inputs) bind.inputs.push_back(activation_at(x, t));
    for (int x : op.outputs) bind.outputs.push_back(activation_at(x, t));
    for (int param : op.params) {
      const auto& slot = layout.slot(param);
      bind.values.push_back(at(weights_at(slot.bucket, t)) + slot.offset);
      bind.grads.push_back(op.pass == models::Pass::Backward ? at(grads_offset[slot.bucket]) + slot.offset : nullptr);
    }
  }
  for (int b = 0; b < p.n_buckets; ++b) {
    if (p.first_grad_op[b] < 0) continue;
    ops[p.first_grad_op[b]].zero_grads_before.push_back(b);
    if (gradsum_offset[b] >= 0) ops[p.last_grad_op[b]].sum_grads_after.push_back(b);
  }
}

// AdamW on the device's copy of the optimizer state (policy resident), with the same kernels and the
// same order of reductions as on the CPU path, so that both give bitwise the same weights.
void Executor::Impl::device_adam(int64_t adam_step, double lr) {
  std::vector<device::Device::OptimizerBucket> buckets;
  for (int b = 0; b < p.n_buckets; ++b) {
    if (p.first_grad_op[b] < 0) continue;
    float* state = at(state_offset[b]);
    const int64_t n = numel(b);
    buckets.push_back({state, state + n, state + 2 * n, at(gradsum_offset[b] >= 0 ? gradsum_offset[b] : grads_offset[b]),
                       at(resident_offset[b]), n});
  }
  const std::string label = "adamw (device)";
  if (!inject(device::Stream::Compute, label))
    dev.adamw(std::move(buckets), adamw, adam_step, lr, options.grad_clip, loss_scale, &decision, label);
}

Executor::Executor(const models::ModelSpec& spec, const offload::StepPlan& plan, memory::HostBuckets& host, device::Device& device,
                   const cpu_optim::CpuAdamW& adamw, const ExecutorOptions& options, device::Trace* trace)
    : impl_(std::make_unique<Impl>(spec, plan, host, device, adamw, options, trace)) {
  Impl& m = *impl_;
  if (plan.problem.cost.weight_bytes != 4 || plan.problem.cost.activation_bytes != 4)
    throw std::invalid_argument("the executor's device computes in fp32: plan it with 4-byte weights and activations");
  m.layout();
  m.bind_ops();
  m.tokens_tensor = spec.tensor_index("tokens");
  m.targets_tensor = spec.tensor_index("targets");
  for (size_t t = 0; t < spec.tensors.size(); ++t)
    if (spec.tensors[t].name == "attention_mask") m.mask_tensor = static_cast<int>(t);
  const int64_t batch_bytes = spec.tensors[m.tokens_tensor].bytes();
  m.batch_staging = memory::HostBuffer(static_cast<size_t>(batch_bytes * 3));  // tokens, targets, mask
  if (m.mask_tensor >= 0) m.no_padding.assign(static_cast<size_t>(batch_bytes / 4), 1);
  if (plan.problem.grad_accum > 1 && !plan.schedule.optimizer_on_device) {
    int64_t total = 0;
    for (int b = 0; b < plan.problem.n_buckets; ++b) m.staging_offset.push_back(total), total += m.bytes(b);
    m.grad_staging = memory::HostBuffer(static_cast<size_t>(total));
  }
  m.stats.assign(plan.problem.n_buckets, {});
  m.updated.assign(plan.problem.n_buckets, nullptr);
  using R = memory::HostBuckets::Region;
  int64_t total = 0;
  std::vector<int64_t> offset;
  for (int b = 0; b < plan.problem.n_buckets; ++b) offset.push_back(total), total += m.bytes(b);
  if (m.delayed()) {
    m.grad_alt = memory::HostBuffer(static_cast<size_t>(total));
    m.working_alt = memory::HostBuffer(static_cast<size_t>(total));
  }
  for (int b = 0; b < plan.problem.n_buckets; ++b) {
    m.grad_land[0].push_back(m.host_region(b, R::Grad));
    m.working_now.push_back(m.host_region(b, R::Working));
    m.grad_land[1].push_back(m.delayed() ? reinterpret_cast<float*>(m.grad_alt.data() + offset[b]) : nullptr);
    m.working_next.push_back(m.delayed() ? reinterpret_cast<float*>(m.working_alt.data() + offset[b]) : nullptr);
  }
  m.working_spare = m.working_next;
  m.cpu = std::make_unique<device::WorkQueue>("cpu-adam", trace);
}

Executor::~Executor() {
  try {
    impl_->barrier();
  } catch (const std::exception&) {
    // already reported by the step that failed
  }
}

void Executor::inject_fault(std::string label) { impl_->fault = std::move(label); }

void Executor::upload_state() {
  Impl& m = *impl_;
  using R = memory::HostBuckets::Region;
  m.pending.has = false;  // the host buckets are the whole state now
  for (int b = 0; b < m.p.n_buckets; ++b) m.working_now[b] = m.host_region(b, R::Working);
  if (m.delayed()) m.working_next = m.working_spare;
  for (int b = 0; b < m.p.n_buckets; ++b) {
    if (m.resident_offset[b] >= 0)
      m.copy(device::Stream::H2D, m.at(m.resident_offset[b]), m.host_region(b, R::Working), m.bytes(b), "upload " + m.bucket_label[b]);
    if (m.state_offset[b] >= 0) {
      const int64_t n = m.numel(b);
      float* state = m.at(m.state_offset[b]);
      m.copy(device::Stream::H2D, state, m.host_region(b, R::Master), n * 4, "upload master " + m.bucket_label[b]);
      m.copy(device::Stream::H2D, state + n, m.host_region(b, R::M), n * 4, "upload m " + m.bucket_label[b]);
      m.copy(device::Stream::H2D, state + 2 * n, m.host_region(b, R::V), n * 4, "upload v " + m.bucket_label[b]);
    }
  }
  m.barrier();
}

void Executor::download_state() {
  Impl& m = *impl_;
  using R = memory::HostBuckets::Region;
  for (int b = 0; b < m.p.n_buckets; ++b) {
    if (m.state_offset[b] < 0) continue;
    const int64_t n = m.numel(b);
    const float* state = m.at(m.state_offset[b]);
    m.copy(device::Stream::D2H, m.host_region(b, R::Master), state, n * 4, "download master " + m.bucket_label[b]);
    m.copy(device::Stream::D2H, m.host_region(b, R::M), state + n, n * 4, "download m " + m.bucket_label[b]);
    m.copy(device::Stream::D2H, m.host_region(b, R::V), state + 2 * n, n * 4, "download v " + m.bucket_label[b]);
    m.copy(device::Stream::D2H, m.host_region(b, R::Working), state, n * 4, "download working " + m.bucket_label[b]);
  }
  m.barrier();
}

StepResult Executor::step(std::span<const dataset::Batch> micro_batches, int64_t adam_step, double lr, float loss_scale) {
  Impl& m = *impl_;
  const auto& p = m.p;
  const auto& s = m.s;
  const int M = static_cast<int>(micro_batches.size());
  if (M != p.grad_accum)
    throw std::invalid_argument(fmt::format("a step takes {} micro-batches (train.grad_accum); got {}", p.grad_accum, M));
  m.h2d_bytes = 0, m.d2h_bytes = 0;
  const double stall0 = m.dev.compute_stall_seconds();
  m.losses.assign(M, 0.0f);
  m.decision = {};
  const float loss_weight = loss_scale / static_cast<float>(M);
  m.loss_scale = loss_scale;
  std::vector<int> update_order;  // buckets in the order their gradients land in the last micro-batch
  std::vector<int> uploads;       // resident buckets to upload after their update (not delayed)
  bool device_adam = false;
  // Delayed update: the previous step's AdamW runs on the CPU while this step computes.
  const bool applying = m.delayed() && m.pending.has;
  if (applying) {
    m.update_decision = m.pending.decision;
    m.queue_updates(m.pending.order, m.pending.parity, m.pending.adam_step, m.pending.lr);
  }
  const int land = m.delayed() ? m.parity : 0;

  for (int micro = 0; micro < M; ++micro) {
    const bool last_micro = micro == M - 1;
    // The batch: into staging now (the previous micro-batch's copy has finished), to the device in order.
    const dataset::Batch& batch = micro_batches[micro];
    const int64_t tok_bytes = m.spec.tensors[m.tokens_tensor].bytes(), tgt_bytes = m.spec.tensors[m.targets_tensor].bytes();
    if (static_cast<int64_t>(batch.tokens.size() * 4) != tok_bytes || static_cast<int64_t>(batch.targets.size() * 4) != tgt_bytes)
      throw std::invalid_argument(fmt::format("a micro-batch has {} tokens; the model step takes {}", batch.tokens.size(), tok_bytes / 4));
    std::memcpy(m.batch_staging.data(), batch.tokens.data(), static_cast<size_t>(tok_bytes));
    std::memcpy(m.batch_staging.data() + tok_bytes, batch.targets.data(), static_cast<size_t>(tgt_bytes));
    m.copy(device::Stream::H2D, m.arena + m.activation_offset[m.entries_of_tensor[m.tokens_tensor].front()], m.batch_staging.data(), tok_bytes, "batch tokens");
    m.copy(device::Stream::H2D, m.arena + m.activation_offset[m.entries_of_tensor[m.targets_tensor].front()], m.batch_staging.data() + tok_bytes, tgt_bytes, "batch targets");
    if (m.mask_tensor >= 0) {
      const auto& mask = batch.attention_mask.empty() ? m.no_padding : batch.attention_mask;
      if (static_cast<int64_t>(mask.size() * 4) != tok_bytes) throw std::invalid_argument("a micro-batch's attention mask has the wrong size");
      std::memcpy(m.batch_staging.data() + 2 * tok_bytes, mask.data(), static_cast<size_t>(tok_bytes));
      m.copy(device::Stream::H2D, m.arena + m.activation_offset[m.entries_of_tensor[m.mask_tensor].front()], m.batch_staging.data() + 2 * tok_bytes,
             tok_bytes, "batch attention mask");
    }
    m.dev.wait(device::Stream::Compute, m.dev.record(device::Stream::H2D), "batch");

    device::EventPtr op_done;  // the compute stream has finished the previous op
    std::vector<device::EventPtr> arrival(p.n_buckets), landed(p.n_buckets);
    std::vector<size_t> next_window(p.n_buckets, 0);
    for (int point = 0; point <= p.n_ops; ++point) {
      for (const Action& a : s.before[point]) {
        const int b = a.bucket;
        switch (a.kind) {
          case Action::Kind::Prefetch: {
            if (next_window[b] >= m.windows[b].size()) throw std::logic_error("more prefetches of " + m.bucket_label[b] + " than windows");
            const Impl::Window& w = m.windows[b][next_window[b]++];
            if (op_done) m.dev.wait(device::Stream::H2D, op_done, "op before prefetch of " + m.bucket_label[b]);
            m.copy(device::Stream::H2D, m.at(w.offset), m.working_now[b], m.bytes(b), "prefetch " + m.bucket_label[b]);
            arrival[b] = m.dev.record(device::Stream::H2D);
            break;
          }
          case Action::Kind::Wait: m.dev.wait(device::Stream::Compute, arrival[b], m.bucket_label[b]); break;
          case Action::Kind::Release: break;  // its memory is reused only by later ops and by copies that wait for them
          case Action::Kind::OffloadGrads: {
            if (op_done) m.dev.wait(device::Stream::D2H, op_done, "gradients of " + m.bucket_label[b]);
            float* dst = micro == 0 ? m.grad_land[land][b] : reinterpret_cast<float*>(m.grad_staging.data() + m.staging_offset[b]);
            m.copy(device::Stream::D2H, dst, m.at(m.grads_offset[b]), m.bytes(b), "offload gradients of " + m.bucket_label[b]);
            landed[b] = m.dev.record(device::Stream::D2H);
            break;
          }
          case Action::Kind::ReleaseGrads: m.dev.wait(device::Stream::Compute, landed[b], "gradients of " + m.bucket_label[b]); break;
          case Action::Kind::CpuAdam: {
            device::EventPtr e = landed[b];
            device::Device* dev = &m.dev;
            m.cpu_run("wait for gradients of " + m.bucket_label[b], [dev, e] { dev->synchronize(e); });
            float* sum = m.grad_land[land][b];
            const int64_t n = m.numel(b);
            if (micro > 0) {
              const float* add = reinterpret_cast<const float*>(m.grad_staging.data() + m.staging_offset[b]);
              m.cpu_run("sum gradients of " + m.bucket_label[b], [sum, add, n] {
                for (int64_t i = 0; i < n; ++i) sum[i] += add[i];
              });
            }
            if (last_micro) {
              m.cpu_run("gradient stats of " + m.bucket_label[b], [&m, b, sum, n] {
                m.stats[b] = m.adamw.grad_stats(sum, DType::F32, static_cast<size_t>(n));
              });
              update_order.push_back(b);
            }
            break;
          }
          case Action::Kind::Upload:
            if (!last_micro) break;
            if (!m.delayed()) {
              uploads.push_back(b);  // once its update is queued, after this step's last op
            } else if (applying) {    // after its last use in this step: the previous step's update
              if (op_done) m.dev.wait(device::Stream::H2D, op_done, "op before upload of " + m.bucket_label[b]);
              m.queue_upload(b);
            }
            break;
          case Action::Kind::DeviceAdam: device_adam = true; break;
        }
      }
      if (point == p.n_ops) break;
      Impl::OpBinding& bind = m.ops[point];
      for (int b : bind.zero_grads_before) {
        const std::string label = "zero gradients of " + m.bucket_label[b];
        if (!m.inject(device::Stream::Compute, label)) m.dev.zero(device::Stream::Compute, m.at(m.grads_offset[b]), m.bytes(b), label);
      }
      const models::OpSpec& op = m.spec.ops[p.op_source[point]];
      const bool is_loss = op.kind == models::OpKind::CrossEntropy && op.pass == models::Pass::Forward;
      if (!m.inject(device::Stream::Compute, bind.label))
        m.dev.run_op(m.spec, op, {bind.inputs, bind.outputs, bind.values, bind.grads}, loss_weight, is_loss ? &m.losses[micro] : nullptr,
                     bind.label);
      for (int b : bind.sum_grads_after) {
        const std::string label = "sum gradients of " + m.bucket_label[b];
        if (!m.inject(device::Stream::Compute, label))
          m.dev.accumulate(device::Stream::Compute, m.at(m.gradsum_offset[b]), m.at(m.grads_offset[b]), m.numel(b), micro == 0, label);
      }
      op_done = m.dev.record(device::Stream::Compute);
    }
    if (!last_micro) m.barrier();
  }

  if (device_adam) m.device_adam(adam_step, lr);
  auto global_norm = [&m] {
    double sum = 0;
    bool finite = true;
    for (int b = 0; b < m.p.n_buckets; ++b) sum += m.stats[b].sum_squares, finite = finite && m.stats[b].finite;
    m.decision = cpu_optim::decide_step(sum, finite, m.options.grad_clip, m.loss_scale);
  };
  if (!update_order.empty() && !m.delayed()) {
    m.cpu_run("global gradient norm", [&m, global_norm] {
      global_norm();
      m.update_decision = m.decision;
    });
    m.queue_updates(update_order, 0, adam_step, lr);
    for (int b : uploads) m.queue_upload(b);
  }
  m.barrier();
  if (m.delayed()) {
    if (applying) m.swap_working(m.pending.order);
    global_norm();  // this step's gradients, applied during the next step
    m.pending = {true, adam_step, lr, m.decision, update_order, m.parity};
    m.parity ^= 1;
  }

  StepResult r;
  double loss = 0;
  for (float l : m.losses) loss += l;
  r.loss = static_cast<float>(loss / M);
  r.grad_norm = m.decision.report.grad_norm;
  r.skipped = m.decision.report.skipped;
  r.h2d_bytes = m.h2d_bytes, r.d2h_bytes = m.d2h_bytes;
  r.stall_s = m.dev.compute_stall_seconds() - stall0;
  return r;
}

void Executor::apply_pending_update() { impl_->flush(); }

std::optional<Executor::PendingUpdate> Executor::pending_update() const {
  const auto& u = impl_->pending;
  if (!u.has) return std::nullopt;
  return PendingUpdate{u.adam_step, u.lr, u.decision};
}

void Executor::set_pending_update(const PendingUpdate& update) {
  Impl& m = *impl_;
  if (!m.delayed()) throw std::logic_error("a pending update needs offload.overlap: delayed");
  std::vector<int> order;
  for (int b = m.p.n_buckets - 1; b >= 0; --b)  // backward's landing order; updates are independent of it
    if (m.p.first_grad_op[b] >= 0) order.push_back(b);
  m.pending = {true, update.adam_step, update.lr, update.decision, order, 0};
  m.parity = 1;
}

std::span<float> Executor::pending_gradients(int b) const {
  const Impl& m = *impl_;
  if (!m.pending.has) throw std::logic_error("no pending update");
  return {m.grad_land[m.pending.parity][b], static_cast<size_t>(m.numel(b))};
}

}  // namespace ferry::engine
