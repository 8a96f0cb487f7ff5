// OptimizerStep: the one definition of an optimizer step over a model's buckets: each bucket's gradient
// statistics, the decision (global norm, clipping, inf/nan skip, loss-scale unscaling), then AdamW on
// each bucket. Used whole (run) or piece by piece as gradients land (record_stats, decide, update).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "cpu_optim/adamw.h"
#include "memory/dtype.h"

namespace ferry::cpu_optim {

// Made once per step; the CpuAdamW must outlive it. Misuse (a bucket recorded twice or never, an update
// before the decision, an update from other gradients than those measured) throws rather than giving a
// silently different step.
class OptimizerStep {
 public:
  // A step decided by its own gradients: buckets 0 .. n_buckets-1 each record their statistics, then
  // decide() clips the global norm to max_norm (<= 0: no clipping) and unscales by loss_scale.
  OptimizerStep(const CpuAdamW& adamw, size_t n_buckets, float max_norm, float loss_scale = 1.0f);
  // A step that applies a decision made earlier (the delayed update, or one kept in a checkpoint): decided
  // from the start, it records nothing and updates any bucket.
  OptimizerStep(const CpuAdamW& adamw, const StepDecision& decision);
  OptimizerStep(OptimizerStep&&) noexcept;
  OptimizerStep& operator=(OptimizerStep&&) noexcept;
  ~OptimizerStep();

  // The statistics of the n gradients of bucket `bucket` (CpuAdamW::grad_stats). From any thread, at the
  // same time for different buckets; each bucket once.
  void record_stats(size_t bucket, const void* grad, DType type, size_t n);
  // Statistics measured elsewhere (a device holding the bucket's optimizer state). The same rules.
  void record_stats(size_t bucket, const GradStats& stats);

  // Sums the statistics in bucket order, not in the order they were recorded: that makes the decision
  // bitwise reproducible. Every bucket must have recorded (one without gradients records GradStats{}),
  // each recording finished before this call (a join, or a work queue that ran it earlier). Called from
  // one thread; later calls return the same decision.
  const StepDecision& decide();
  bool decided() const;
  const StepDecision& decision() const;  // throws before decide()

  // AdamW on one bucket under the decision: nothing when the step is skipped, otherwise every gradient
  // times decision().grad_scale. After decide() has returned; from any thread, at the same time for
  // different buckets. The bucket's gradients must be those its statistics were recorded from.
  void update(size_t bucket, const Bucket& b, int64_t step, double lr) const;
  void update(size_t bucket, const CompactBucket& b, int64_t step, double lr) const;  // the compact state's

  // The whole step over `buckets` (bucket i at index i): checks them all before it changes any, records,
  // decides and updates. On a step with a given decision: checks and updates.
  StepReport run(std::span<const Bucket> buckets, int64_t step, double lr);

 private:
  struct State;
  const CpuAdamW* adamw_;
  std::unique_ptr<State> state_;
};

}  // namespace ferry::cpu_optim
