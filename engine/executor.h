// Executor: runs every step's Schedule on a Device. Compute on one stream, host-to-device and
// device-to-host copies on two others, CPU AdamW on a worker of its own, ordered only by events, so that
// copies and the optimizer overlap the compute. Every device tensor sits where the plan's memory layout
// put it in the device's arena; nothing is allocated on the device after start-up.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "cpu_optim/adamw.h"
#include "dataset/dataset.h"
#include "engine/device/device.h"
#include "engine/device/trace.h"
#include "engine/group_settings.h"
#include "memory/host_buckets.h"
#include "memory/pinned_pool.h"
#include "memory/tensor_view.h"
#include "models/model_spec.h"
#include "offload/policies.h"

namespace ferry::engine {

struct ExecutorOptions {
  float grad_clip = 0;  // max global gradient norm; 0: off
  // Per parameter (indexed like spec.params): its parameter group's lr multiplier and weight decay, applied
  // by the CPU and the device AdamW alike. Empty: every parameter with the AdamW's own lr and weight decay.
  // Which parameters are frozen is the spec's (models::ParamSpec::frozen, which the plan was made from);
  // `frozen` here must agree with it.
  std::vector<ParamSettings> params;
};

struct StepResult {
  float loss = 0;            // mean over the micro-batches
  double grad_norm = 0;
  bool skipped = false;      // an inf/nan gradient: nothing was updated
  int64_t h2d_bytes = 0, d2h_bytes = 0;
  double stall_s = 0;        // time the compute stream waited for copies
  double host_wait_s = 0;    // time the host thread waited (for the streams, the CPU's AdamW): the rest of the
                             // step's wall time it spent queueing work
};

class Executor {
 public:
  // The pinned host bytes the executor carves from its pool beyond the host buckets (batch staging, fp32
  // gradient sums over micro-batches, the delayed update's second buffers).
  static int64_t host_bytes_needed(const models::ModelSpec& spec, const offload::StepPlan& plan);
  // Where the plan's gradients land on the host: on the working copies (2 bytes a parameter less) where nothing
  // reads a working copy between its bucket's gradients landing and its update: one micro-batch a step, the update
  // not delayed, the exact state. Otherwise in regions of their own.
  static memory::HostBuckets::GradLanding gradient_landing(const offload::StepPlan& plan);
  // Per bucket, whether the device alone keeps its whole state: the plan's device tier (trained buckets whose
  // AdamW runs on the device: master, m, v and working copy in the arena). The host buckets may leave these out
  // (HostBuckets' on_device); start-up, resume and checkpoints then move their state with write_device_tier and
  // read_device_tier.
  static std::vector<bool> device_only_buckets(const offload::StepPlan& plan);
  // host: the buckets' master weights, moments, working copies and gradient landing regions (those two in
  // the plan's precision, landing as gradient_landing(plan) or in regions of their own), laid out as
  // plan.problem.layout, with or without the buckets of device_only_buckets(plan); pool: the device's pinned host
  // memory, with host_bytes_needed() left to carve. The device's arena must hold plan.memory's layout. With red zones
  // in the plan (tests), every op is followed by a check that no tensor it touched was written past its end (host
  // device only).
  Executor(const models::ModelSpec& spec, const offload::StepPlan& plan, memory::HostBuckets& host, memory::PinnedHostPool& pool,
           device::Device& device, const cpu_optim::CpuAdamW& adamw, const ExecutorOptions& options, device::Trace* trace);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Puts the host's state on the device: resident working copies and, when AdamW runs on the device,
  // its master weights and moments (of the buckets the host keeps). Call after changing the host buckets (start,
  // resume); with the pipelined update, change them only after an entry point below has finished the last step's
  // update.
  void upload_state();
  // Brings the device optimizer's master weights and moments back to the host buckets that keep them (nothing to
  // do when AdamW runs on the CPU: the host holds them already). Call before reading them (eval, checkpoint).
  // A pending delayed update stays pending: the host then holds the weights the next step computes with.
  void download_state();

  // The state of a bucket the device alone keeps (HostBuckets::on_device): one parameter's master weights (with
  // its working copy, rounded from them as start-up rounds the host's), m or v, written to the device or read from
  // it through a pinned staging area of kTierStagingBytes at most, synchronously. Between steps: start-up, resume,
  // checkpoints. A write may give the parameter's elements [first, first + values.size()) alone: start-up writes a
  // large parameter a staging's worth at a time.
  static constexpr int64_t kTierStagingBytes = int64_t{4} << 20;
  void write_device_tier(int param, memory::HostBuckets::Region r, std::span<const float> values, int64_t first = 0);
  void read_device_tier(int param, memory::HostBuckets::Region r, std::span<float> out);
  // Zeroes a parameter's m and v there (start-up: the moments start at zero), with no host buffer.
  void zero_device_tier_moments(int param);

  // One optimizer step over plan.problem.grad_accum micro-batches: forward, backward, gradients summed
  // over the micro-batches, global-norm clipping, AdamW (step counts from 1).
  // With the delayed update (offload.overlap: delayed), the step's AdamW runs during the next step; the
  // result reports this step's loss and gradient norm, and whether its update will be skipped.
  // With the pipelined update (offload.overlap: pipelined), step() returns once the loss and the decision
  // are known, while the CPU's AdamW of this step and the uploads of its weights-resident buckets go on;
  // the next step's forward waits for each bucket's new weights where it first needs them. Every other
  // method finishes that update first, so that the host and the device hold the exact state after the step.
  // loss_scale: fp16's dynamic loss scale (gradients are computed scaled and unscaled inside AdamW).
  StepResult step(std::span<const dataset::Batch> micro_batches, int64_t adam_step, double lr, float loss_scale = 1.0f);

  // The mean loss of one batch, forward only, with the weights the next step computes with: the plan's ops
  // up to the loss and the copies that bring their weights, on the device (evaluation needs no copy of the
  // model). Changes no training state; call between steps.
  float evaluate(const dataset::Batch& batch);

  // Delayed update: the update of the last step, not applied yet; apply it now (a synchronous step), or
  // save and restore it with a checkpoint: its gradients are pending_gradients(b) per bucket. (A pipelined
  // update in flight is never pending: these finish it first.)
  struct PendingUpdate {
    int64_t adam_step = 0;
    double lr = 0;
    cpu_optim::StepDecision decision;
  };
  void apply_pending_update();
  std::optional<PendingUpdate> pending_update() const;
  void set_pending_update(const PendingUpdate& update);  // then fill pending_gradients(b)
  memory::TensorView pending_gradients(int bucket) const;  // fp32 sums, or in the precision they landed in

  // Tests only: from now on, every task whose label contains `label` fails instead of running.
  void inject_fault(std::string label);
  // Tests only: from now on, every CPU worker task whose label contains `label` first sleeps `delay` (a slow
  // CPU AdamW, to show a missing wait for it as a race).
  void inject_delay(std::string label, std::chrono::microseconds delay);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::engine
