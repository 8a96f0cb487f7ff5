// HostOptimizer: the host side of a step for the buckets whose AdamW runs on the CPU. It owns the
// gradient landing regions, the working copies that travel to the device (both in the step's precision),
// and the CPU worker that gathers each bucket's gradient statistics as they land, decides the step once
// every bucket is in (global norm, clipping, inf/nan skip) and updates each bucket with a fused copy-out
// into its working copy. Micro-batches' gradients are summed in fp32. With the delayed update
// (ZeRO-Offload's), a step's updates run during the next step: gradients alternate between two landing
// regions and working copies are swapped once the updates are in. With the pipelined update, a step's
// updates run on into the next step with the same buffers (the executor orders their reuse); every task
// holds the OptimizerStep it belongs to, so a new step can begin while the last one's updates run. The compact
// state (optim.state: compact) has no master: AdamW updates the bf16 working copy, m and v in place.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cpu_optim/adamw.h"
#include "cpu_optim/optimizer_step.h"
#include "engine/device/device.h"
#include "engine/device/work_queue.h"
#include "engine/faults.h"
#include "memory/host_buckets.h"
#include "memory/pinned_pool.h"
#include "memory/tensor_view.h"
#include "offload/problem.h"

namespace ferry::engine {

class HostOptimizer {
 public:
  // The pinned bytes it carves beyond the host buckets: fp32 sums over micro-batches, the delayed update's
  // second landing regions and working copies (the pipelined update needs no second buffers); none for the
  // buckets of device_only (per bucket: the device tier, whose gradients never come to the host).
  static int64_t bytes_needed(const offload::OffloadProblem& problem, bool delayed,
                              const std::vector<bool>& device_only);
  // bucket_labels: how errors and the trace name each bucket. ranges: per bucket, the lr multipliers and
  // weight decays of its parameter groups (cpu_optim::Bucket::ranges; empty, or an empty entry: the plain
  // update). Its extra buffers come from `pool`. Buckets without gradients (frozen) are never updated, nor are
  // those of device_only (the device updates them).
  HostOptimizer(const offload::OffloadProblem& problem, const std::vector<bool>& device_only, memory::HostBuckets& host,
                memory::PinnedHostPool& pool, const cpu_optim::CpuAdamW& adamw, bool delayed, float max_norm,
                std::vector<std::string> bucket_labels, std::vector<std::vector<cpu_optim::HyperRange>> ranges,
                const Faults& faults, device::Trace* trace);
  ~HostOptimizer();

  // A new step: its statistics are gathered as gradients land, under this loss scale. The last step's
  // updates may still be queued (pipelined): they keep their own OptimizerStep.
  void begin_step(float loss_scale);
  // Where bucket b's gradients land (in the precision), every micro-batch's.
  std::byte* landing(int bucket) const { return grad_land_[landing_parity()][bucket]; }
  // Queues, on the CPU worker: wait for the gradients to land (`landed`), add them to the bucket's fp32 sum
  // when micro-batches accumulate, and after the last micro-batch the bucket's statistics.
  void gather(int bucket, device::Device& device, device::EventPtr landed, int micro, bool last_micro);

  // Statistics of buckets the device updates (its device tier), for the one decision of the step: once
  // `ready` is done, stats[i] is bucket buckets[i]'s. stats must live until the decision is made.
  void record_device_stats(std::vector<int> buckets, const cpu_optim::GradStats* stats, device::Device& device, device::EventPtr ready);
  // The step decision from every bucket's statistics (global norm, clip scale, inf/nan skip); the event
  // follows it, after which *decided() holds it (for the device tier's AdamW to read).
  std::shared_ptr<device::HostEvent> queue_decision();
  // The calling thread waits for a host event of this worker (the decision); throws the worker's failure.
  static void wait(const std::shared_ptr<device::HostEvent>& event);
  const cpu_optim::StepDecision& decision() const { return step_->decision(); }
  const cpu_optim::StepDecision* decided() const { return &decided_; }
  // Queues AdamW on `order`'s buckets with this step's gradients and decision; each bucket's `updated`
  // event follows its update (uploads wait for it).
  void queue_updates(const std::vector<int>& order, int64_t adam_step, double lr);
  std::shared_ptr<device::HostEvent> updated(int bucket) const { return updated_[bucket]; }

  // The working copy prefetches read, and the one an upload sends after this step's update.
  const std::byte* working(int bucket) const { return working_now_[bucket]; }
  const std::byte* updated_working(int bucket) const { return delayed_ ? working_next_[bucket] : working_now_[bucket]; }

  // Waits for the CPU worker; throws its first failure.
  void drain() { worker_->drain(); }
  // The host buckets were rewritten (start, resume): they are the whole state; nothing is pending.
  void reset();

  // Delayed update: the update of the last step, not applied yet.
  struct Pending {
    int64_t adam_step = 0;
    double lr = 0;
    std::shared_ptr<const cpu_optim::OptimizerStep> step;  // decided
    std::vector<int> order;  // buckets to update
    int parity = 0;          // which landing region holds its gradients
    const cpu_optim::StepDecision& decision() const { return step->decision(); }
  };
  bool has_pending() const { return has_pending_; }
  const Pending& pending() const { return pending_; }
  // Queues the pending update on the CPU worker (at the start of a step, or to flush it).
  void queue_pending();
  // After the step's barrier: the pending update (if queued) is applied; this step's becomes pending.
  void end_delayed_step(int64_t adam_step, double lr, std::vector<int> order);
  void end_pending() { swap_working(pending_.order), has_pending_ = false; }
  // A checkpoint's pending update: its gradients go to pending_gradients(b), then it applies next step to
  // the buckets of `order` (those the CPU updates: a device tier's were updated by the step itself).
  void set_pending(int64_t adam_step, double lr, const cpu_optim::StepDecision& decision, std::vector<int> order);
  // The pending update's gradients of a bucket: fp32 sums, or as they landed in the precision (no data for a bucket
  // of the device tier: the step updated it).
  memory::TensorView pending_gradients(int bucket) const;
  int landing_parity() const { return delayed_ ? parity_ : 0; }

 private:
  void add_frozen(memory::HostBuckets& host, int bucket);
  void queue_update(std::shared_ptr<const cpu_optim::OptimizerStep> step, int bucket, int grads, int64_t adam_step, double lr);
  void swap_working(const std::vector<int>& order);
  float* region(int bucket, memory::HostBuckets::Region r) const { return host_.region(bucket, r).as<float>(); }
  void run(std::string label, std::function<void()> work);
  bool summed() const { return p_.grad_accum > 1; }
  // The gradients AdamW and the statistics read for a parity: the fp32 sums, or the landing region.
  const void* gradients(int parity, int bucket) const { return summed() ? static_cast<const void*>(grad_sum_[parity][bucket]) : grad_land_[parity][bucket]; }
  DType gradient_type() const { return summed() ? DType::F32 : p_.precision; }

  const offload::OffloadProblem& p_;
  memory::HostBuckets& host_;
  const cpu_optim::CpuAdamW& adamw_;
  const bool delayed_;
  const float max_norm_;
  const Faults& faults_;
  const std::vector<std::string> label_;
  const std::vector<bool> device_only_;
  const std::vector<std::vector<cpu_optim::HyperRange>> ranges_;

  std::vector<std::byte*> grad_land_[2];  // per parity, per bucket: in the precision
  std::vector<float*> grad_sum_[2];       // per parity, per bucket: fp32 sums over micro-batches (grad_accum > 1)
  std::vector<std::byte*> working_now_, working_next_, working_spare_;
  std::vector<uint32_t> first_index_;  // per bucket: its first element's index in the model (cpu_optim::CompactBucket)
  int parity_ = 0;

  // This step's: statistics as gradients land, then the decision. Shared with the tasks that use it, so
  // that the pipelined update's tasks outlive begin_step of the next step.
  std::shared_ptr<cpu_optim::OptimizerStep> step_;
  cpu_optim::StepDecision decided_;                // a copy of the decision, where the device tier reads it
  std::vector<std::shared_ptr<device::HostEvent>> updated_;
  bool has_pending_ = false;
  Pending pending_;

  std::unique_ptr<device::WorkQueue> worker_;  // last: drained and joined first
};

}  // namespace ferry::engine
