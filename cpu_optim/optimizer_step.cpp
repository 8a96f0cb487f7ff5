// OptimizerStep: per-bucket statistics slots filled from any thread, the decision summed in bucket order,
// the updates under it; and CpuAdamW::apply, which is the whole of such a step.
#include "cpu_optim/optimizer_step.h"

#include <atomic>
#include <stdexcept>
#include <string>

namespace ferry::cpu_optim {
namespace {

enum SlotState : int { kEmpty, kRecording, kRecorded };

std::string bucket_name(size_t bucket) { return "optimizer step: bucket " + std::to_string(bucket); }

}  // namespace

struct OptimizerStep::State {
  // One bucket's statistics, and what they were measured from (grad null: measured elsewhere), so that an
  // update from other gradients is caught.
  struct Slot {
    std::atomic<int> state{kEmpty};  // kEmpty -> kRecording -> kRecorded; the last store publishes the rest
    GradStats stats;
    const void* grad = nullptr;
    DType type = DType::F32;
    size_t n = 0;
  };

  bool given = false;  // the decision was made by an earlier step
  float max_norm = 0, loss_scale = 1;
  size_t n_buckets = 0;
  std::unique_ptr<Slot[]> slots;
  StepDecision decision;
  std::atomic<bool> decided{false};  // publishes `decision` to the threads that update

  Slot& claim(size_t bucket) {
    if (given) throw std::logic_error("optimizer step: it applies a decision made earlier and records no statistics");
    if (decided.load(std::memory_order_acquire)) throw std::logic_error(bucket_name(bucket) + " recorded after decide()");
    if (bucket >= n_buckets)
      throw std::out_of_range(bucket_name(bucket) + " does not exist; the step has " + std::to_string(n_buckets));
    int empty = kEmpty;
    if (!slots[bucket].state.compare_exchange_strong(empty, kRecording, std::memory_order_acq_rel))
      throw std::logic_error(bucket_name(bucket) + " recorded its statistics twice");
    return slots[bucket];
  }

  // The bucket's gradients must be those it recorded statistics of: the decision's scale is theirs.
  void check_update(size_t bucket, const void* grad, DType type, size_t n) const {
    if (given) return;
    if (bucket >= n_buckets)
      throw std::out_of_range(bucket_name(bucket) + " does not exist; the step has " + std::to_string(n_buckets));
    const Slot& s = slots[bucket];
    if (s.grad && (s.grad != grad || s.type != type || s.n != n))
      throw std::invalid_argument(bucket_name(bucket) + ": the update's gradients are not those its statistics were recorded from");
  }
};

OptimizerStep::OptimizerStep(const CpuAdamW& adamw, size_t n_buckets, float max_norm, float loss_scale)
    : adamw_(&adamw), state_(std::make_unique<State>()) {
  if (!(loss_scale > 0)) throw std::invalid_argument("optimizer step: the loss scale must be > 0");
  state_->max_norm = max_norm, state_->loss_scale = loss_scale;
  state_->n_buckets = n_buckets;
  state_->slots = std::make_unique<State::Slot[]>(n_buckets);
}

OptimizerStep::OptimizerStep(const CpuAdamW& adamw, const StepDecision& decision)
    : adamw_(&adamw), state_(std::make_unique<State>()) {
  state_->given = true;
  state_->decision = decision;
  state_->decided.store(true, std::memory_order_release);
}

OptimizerStep::OptimizerStep(OptimizerStep&&) noexcept = default;
OptimizerStep& OptimizerStep::operator=(OptimizerStep&&) noexcept = default;
OptimizerStep::~OptimizerStep() = default;

void OptimizerStep::record_stats(size_t bucket, const void* grad, DType type, size_t n) {
  State::Slot& s = state_->claim(bucket);
  try {
    s.stats = adamw_->grad_stats(grad, type, n);
  } catch (...) {
    s.state.store(kEmpty, std::memory_order_release);  // refused gradients: the bucket may record again
    throw;
  }
  s.grad = grad, s.type = type, s.n = n;
  s.state.store(kRecorded, std::memory_order_release);
}

void OptimizerStep::record_stats(size_t bucket, const GradStats& stats) {
  State::Slot& s = state_->claim(bucket);
  s.stats = stats;
  s.state.store(kRecorded, std::memory_order_release);
}

const StepDecision& OptimizerStep::decide() {
  State& st = *state_;
  if (decided()) return st.decision;
  double sum = 0;
  bool finite = true;
  for (size_t b = 0; b < st.n_buckets; ++b) {
    const State::Slot& s = st.slots[b];
    if (s.state.load(std::memory_order_acquire) != kRecorded)
      throw std::logic_error(bucket_name(b) + " has no gradient statistics: every bucket records before decide()");
    sum += s.stats.sum_squares;
    finite = finite && s.stats.finite;
  }
  st.decision = decide_step(sum, finite, st.max_norm, st.loss_scale);
  st.decided.store(true, std::memory_order_release);
  return st.decision;
}

bool OptimizerStep::decided() const { return state_->decided.load(std::memory_order_acquire); }

const StepDecision& OptimizerStep::decision() const {
  if (!decided()) throw std::logic_error("optimizer step: no decision before decide()");
  return state_->decision;
}

void OptimizerStep::update(size_t bucket, const Bucket& b, int64_t step, double lr) const {
  const StepDecision& d = decision();
  state_->check_update(bucket, b.grad, b.grad_type, b.param.size());
  adamw_->check(b);
  if (d.report.skipped) return;
  adamw_->step(b, step, lr, d.grad_scale);
}

void OptimizerStep::update(size_t bucket, const CompactBucket& b, int64_t step, double lr) const {
  const StepDecision& d = decision();
  state_->check_update(bucket, b.grad, b.grad_type, b.param.size());
  adamw_->check(b);
  if (d.report.skipped) return;
  adamw_->step(b, step, lr, d.grad_scale);
}

StepReport OptimizerStep::run(std::span<const Bucket> buckets, int64_t step, double lr) {
  for (const Bucket& b : buckets) adamw_->check(b);
  if (!decided()) {
    if (buckets.size() != state_->n_buckets)
      throw std::invalid_argument("optimizer step: run over " + std::to_string(buckets.size()) + " buckets; the step has " +
                                  std::to_string(state_->n_buckets));
    for (size_t i = 0; i < buckets.size(); ++i)
      record_stats(i, buckets[i].grad, buckets[i].grad_type, buckets[i].param.size());
    decide();
  }
  for (size_t i = 0; i < buckets.size(); ++i) update(i, buckets[i], step, lr);
  return decision().report;
}

StepReport CpuAdamW::apply(std::span<const Bucket> buckets, int64_t step, double lr, float max_norm, float loss_scale) const {
  return OptimizerStep(*this, buckets.size(), max_norm, loss_scale).run(buckets, step, lr);
}

}  // namespace ferry::cpu_optim
