// HostOptimizer: landing regions and working copies carved per bucket; every task on one CPU worker, in
// the order the executor queues them, so statistics, the decision and the updates need no locks.
#include "engine/host_optimizer.h"

#include <stdexcept>

namespace ferry::engine {

using Region = memory::HostBuckets::Region;

HostOptimizer::HostOptimizer(const offload::OffloadProblem& p, memory::HostBuckets& host, const cpu_optim::CpuAdamW& adamw,
                             bool delayed, float max_norm, std::vector<std::string> bucket_labels, const Faults& faults,
                             device::Trace* trace)
    : p_(p), host_(host), adamw_(adamw), delayed_(delayed), max_norm_(max_norm), faults_(faults), label_(std::move(bucket_labels)) {
  const int nb = p.n_buckets;
  std::vector<int64_t> offset;
  int64_t total = 0;
  for (int b = 0; b < nb; ++b) offset.push_back(total), total += p.bucket_numel(b) * 4;
  if (p.grad_accum > 1) staging_ = memory::HostBuffer(static_cast<size_t>(total)), staging_offset_ = offset;
  if (delayed) grad_alt_ = memory::HostBuffer(static_cast<size_t>(total)), working_alt_ = memory::HostBuffer(static_cast<size_t>(total));
  for (int b = 0; b < nb; ++b) {
    grad_land_[0].push_back(region(b, Region::Grad));
    grad_land_[1].push_back(delayed ? reinterpret_cast<float*>(grad_alt_.data() + offset[b]) : nullptr);
    working_now_.push_back(region(b, Region::Working));
    working_next_.push_back(delayed ? reinterpret_cast<float*>(working_alt_.data() + offset[b]) : nullptr);
  }
  working_spare_ = working_next_;
  updated_.assign(nb, nullptr);
  worker_ = std::make_unique<device::WorkQueue>("cpu-adam", trace);
}

HostOptimizer::~HostOptimizer() {
  try {
    worker_->drain();
  } catch (const std::exception&) {
    // reported by the step that failed
  }
}

void HostOptimizer::begin_step(float loss_scale) {
  step_.emplace(adamw_, static_cast<size_t>(p_.n_buckets), max_norm_, loss_scale);
  for (int b = 0; b < p_.n_buckets; ++b)
    if (p_.first_grad_op[b] < 0) step_->record_stats(static_cast<size_t>(b), cpu_optim::GradStats{});  // no gradients
}

void HostOptimizer::run(std::string label, std::function<void()> work) {
  if (faults_.hits(label)) work = [] { throw std::runtime_error("injected fault"); };
  worker_->run(std::move(label), std::move(work));
}

float* HostOptimizer::landing(int b, int micro) const {
  if (micro == 0) return grad_land_[landing_parity()][b];
  return reinterpret_cast<float*>(const_cast<std::byte*>(staging_.data()) + staging_offset_[b]);
}

void HostOptimizer::gather(int b, device::Device& device, device::EventPtr landed, int micro, bool last_micro) {
  run("wait for gradients of " + label_[b], [&device, landed] { device.synchronize(landed); });
  float* sum = grad_land_[landing_parity()][b];
  const int64_t n = p_.bucket_numel(b);
  if (micro > 0) {
    const float* add = landing(b, micro);
    run("sum gradients of " + label_[b], [sum, add, n] {
      for (int64_t i = 0; i < n; ++i) sum[i] += add[i];
    });
  }
  if (last_micro)
    run("gradient stats of " + label_[b], [this, b, sum, n] { step_->record_stats(static_cast<size_t>(b), sum, DType::F32, static_cast<size_t>(n)); });
}

void HostOptimizer::queue_decision() {
  run("global gradient norm", [this] { step_->decide(); });
}

// AdamW on bucket b under `step`'s decision, its fp32 working copy written by the same fused pass.
void HostOptimizer::queue_update(const cpu_optim::OptimizerStep& step, int b, int grads, int64_t adam_step, double lr) {
  run("adamw " + label_[b], [this, &step, b, grads, adam_step, lr] {
    const size_t n = static_cast<size_t>(p_.bucket_numel(b));
    float* out = delayed_ ? working_next_[b] : working_now_[b];
    if (step.decision().report.skipped && delayed_) std::copy_n(working_now_[b], n, out);  // the next copy is the current one
    step.update(static_cast<size_t>(b), {{region(b, Region::Master), n}, {region(b, Region::M), n}, {region(b, Region::V), n},
                                         grad_land_[grads][b], DType::F32, out, DType::F32},
                adam_step, lr);
  });
  updated_[b] = worker_->record();
}

void HostOptimizer::queue_updates(const std::vector<int>& order, int64_t adam_step, double lr) {
  for (int b : order) queue_update(*step_, b, landing_parity(), adam_step, lr);
}

void HostOptimizer::queue_pending() {
  if (!has_pending_) return;
  for (int b : pending_.order) queue_update(*pending_.step, b, pending_.parity, pending_.adam_step, pending_.lr);
}

void HostOptimizer::end_delayed_step(int64_t adam_step, double lr, std::vector<int> order) {
  if (has_pending_) swap_working(pending_.order);
  pending_ = {adam_step, lr, std::move(step_), std::move(order), parity_};
  step_.reset();
  has_pending_ = true;
  parity_ ^= 1;
}

void HostOptimizer::swap_working(const std::vector<int>& order) {
  for (int b : order) std::swap(working_now_[b], working_next_[b]);
}

void HostOptimizer::reset() {
  has_pending_ = false;
  for (int b = 0; b < p_.n_buckets; ++b) working_now_[b] = region(b, Region::Working);
  if (delayed_) working_next_ = working_spare_;
}

void HostOptimizer::set_pending(int64_t adam_step, double lr, const cpu_optim::StepDecision& decision) {
  if (!delayed_) throw std::logic_error("a pending update needs offload.overlap: delayed");
  std::vector<int> order;
  for (int b = p_.n_buckets - 1; b >= 0; --b)  // backward's landing order; updates are independent of it
    if (p_.first_grad_op[b] >= 0) order.push_back(b);
  pending_ = {adam_step, lr, cpu_optim::OptimizerStep(adamw_, decision), std::move(order), 0};
  has_pending_ = true;
  parity_ = 1;
}

std::span<float> HostOptimizer::pending_gradients(int b) const {
  if (!has_pending_) throw std::logic_error("no pending update");
  return {grad_land_[pending_.parity][b], static_cast<size_t>(p_.bucket_numel(b))};
}

}  // namespace ferry::engine
