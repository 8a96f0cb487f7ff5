// HostOptimizer: landing regions and working copies carved per bucket; every task on one CPU worker, in
// the order the executor queues them, so statistics, the decision and the updates need no locks.
#include "engine/host_optimizer.h"

#include <cstring>
#include <stdexcept>
#include <thread>

#include "memory/convert.h"

namespace ferry::engine {

using Region = memory::HostBuckets::Region;

namespace {

constexpr int64_t kAlignment = 4096;  // page-aligned regions, as the host buckets'

int64_t aligned(int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

}  // namespace

int64_t HostOptimizer::bytes_needed(const offload::OffloadProblem& p, bool delayed,
                                    const std::vector<bool>& device_only) {
  int64_t total = 0;
  const int parities = delayed ? 2 : 1;
  for (int b = 0; b < p.n_buckets; ++b) {
    if (p.layout.buckets()[b].frozen || device_only.at(b)) continue;  // nothing lands here or is updated here
    if (p.grad_accum > 1) total += parities * aligned(p.bucket_numel(b) * 4);
    if (delayed) total += 2 * aligned(p.bucket_bytes[b]);  // a second landing region and a second working copy
  }
  return total;
}

HostOptimizer::HostOptimizer(const offload::OffloadProblem& p, const std::vector<bool>& device_only,
                             memory::HostBuckets& host, memory::PinnedHostPool& pool, const cpu_optim::CpuAdamW& adamw,
                             bool delayed, float max_norm, std::vector<std::string> bucket_labels,
                             std::vector<std::vector<cpu_optim::HyperRange>> ranges, const Faults& faults,
                             device::Trace* trace)
    : p_(p), host_(host), adamw_(adamw), delayed_(delayed), max_norm_(max_norm), faults_(faults),
      label_(std::move(bucket_labels)), device_only_(device_only), ranges_(std::move(ranges)) {
  const int nb = p.n_buckets;
  if (delayed && host.compact())
    throw std::logic_error(
        "host optimizer: the compact state updates its weights in place, which the delayed update reads meanwhile");
  uint32_t first =
      0;  // the elements before a bucket, modulo 2^32: stochastic rounding hashes an element's index in the model
  for (int b = 0; b < nb; ++b) first_index_.push_back(first), first += static_cast<uint32_t>(p.bucket_numel(b));
  if (!ranges_.empty() && static_cast<int>(ranges_.size()) != nb)
    throw std::logic_error("host optimizer: hyper-parameter ranges for " + std::to_string(ranges_.size()) + " buckets; the plan has " +
                           std::to_string(nb));
  for (int b = 0; b < nb; ++b) {
    const int64_t sum_bytes = p.bucket_numel(b) * 4, bytes = p.bucket_bytes[b];
    if (p.layout.buckets()[b].frozen) {  // never updated; its gradients (a checkpoint's pending ones) read as the host's zeros
      add_frozen(host, b);
      continue;
    }
    if (device_only_.at(b)) {  // the device tier: its gradients stay on the device; the host may keep no region of it
      for (auto* per_bucket : {&grad_land_[0], &grad_land_[1], &working_next_}) per_bucket->push_back(nullptr);
      for (auto& sums : grad_sum_) sums.push_back(nullptr);
      working_now_.push_back(host.on_device(b) ? nullptr : host.region(b, Region::Working).as<std::byte>());
      continue;
    }
    grad_land_[0].push_back(host.region(b, Region::Grad).as<std::byte>());
    grad_land_[1].push_back(delayed ? pool.carve(aligned(bytes), kAlignment) : nullptr);
    for (int parity = 0; parity < 2; ++parity)
      grad_sum_[parity].push_back(summed() && (parity == 0 || delayed) ? reinterpret_cast<float*>(pool.carve(aligned(sum_bytes), kAlignment))
                                                                      : nullptr);
    working_now_.push_back(host.region(b, Region::Working).as<std::byte>());
    working_next_.push_back(delayed ? pool.carve(aligned(bytes), kAlignment) : nullptr);
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

// A frozen bucket lands nothing and is never updated: every gradient view of it is the host buckets'
// gradient region, which HostBuckets backs with zeros for a frozen bucket (as large as its fp32 regions,
// so it serves as the fp32 sums too).
void HostOptimizer::add_frozen(memory::HostBuckets& host, int b) {
  std::byte* zeros = host.region(b, Region::Grad).as<std::byte>();
  for (int parity = 0; parity < 2; ++parity) {
    grad_land_[parity].push_back(zeros);
    grad_sum_[parity].push_back(summed() ? reinterpret_cast<float*>(zeros) : nullptr);
  }
  working_now_.push_back(host.region(b, Region::Working).as<std::byte>());
  working_next_.push_back(nullptr);  // never swapped: only updated buckets are
}

void HostOptimizer::begin_step(float loss_scale) {
  step_ = std::make_shared<cpu_optim::OptimizerStep>(adamw_, static_cast<size_t>(p_.n_buckets), max_norm_, loss_scale);
  for (int b = 0; b < p_.n_buckets; ++b)
    if (p_.first_grad_op[b] < 0) step_->record_stats(static_cast<size_t>(b), cpu_optim::GradStats{});  // no gradients
}

void HostOptimizer::run(std::string label, std::function<void()> work) {
  if (faults_.hits(label)) work = [] { throw std::runtime_error("injected fault"); };
  if (faults_.slows(label))
    work = [delay = faults_.slow, work = std::move(work)] {
      std::this_thread::sleep_for(delay);
      work();
    };
  worker_->run(std::move(label), std::move(work));
}

void HostOptimizer::gather(int b, device::Device& device, device::EventPtr landed, int micro, bool last_micro) {
  run("wait for gradients of " + label_[b], [&device, landed] { device.synchronize(landed); });
  const int parity = landing_parity();
  const int64_t n = p_.bucket_numel(b);
  if (summed()) {  // the device's fp32 sum, in the same order: the first micro-batch widened, the others added
    float* sum = grad_sum_[parity][b];
    const std::byte* landed_grads = grad_land_[parity][b];
    const DType type = p_.precision;
    run("sum gradients of " + label_[b], [sum, landed_grads, type, n, micro] { memory::accumulate_widened(sum, landed_grads, type, n, micro == 0); });
  }
  if (last_micro) {
    const void* grads = gradients(parity, b);
    const DType type = gradient_type();
    run("gradient stats of " + label_[b],
        [step = step_, b, grads, type, n] { step->record_stats(static_cast<size_t>(b), grads, type, static_cast<size_t>(n)); });
  }
}

void HostOptimizer::record_device_stats(std::vector<int> buckets, const cpu_optim::GradStats* stats, device::Device& device,
                                        device::EventPtr ready) {
  run("gradient stats of the device tier", [step = step_, buckets = std::move(buckets), stats, &device, ready] {
    device.synchronize(ready);
    for (size_t i = 0; i < buckets.size(); ++i) step->record_stats(static_cast<size_t>(buckets[i]), stats[i]);
  });
}

std::shared_ptr<device::HostEvent> HostOptimizer::queue_decision() {
  run("global gradient norm", [this, step = step_] { decided_ = step->decide(); });
  return worker_->record();
}

void HostOptimizer::wait(const std::shared_ptr<device::HostEvent>& event) {
  if (const std::string error = event->wait(); !error.empty()) throw std::runtime_error(error);
}

// AdamW on bucket b under `step`'s decision, its working copy (in the precision) written by the same fused pass;
// the compact state's working copy is the weight, updated in place.
void HostOptimizer::queue_update(std::shared_ptr<const cpu_optim::OptimizerStep> step_ptr, int b, int grads, int64_t adam_step, double lr) {
  run("adamw " + label_[b], [this, step_ptr = std::move(step_ptr), b, grads, adam_step, lr] {
    const cpu_optim::OptimizerStep& step = *step_ptr;
    const size_t n = static_cast<size_t>(p_.bucket_numel(b));
    const std::span<const cpu_optim::HyperRange> ranges =
        ranges_.empty() ? std::span<const cpu_optim::HyperRange>() : ranges_[b];
    if (host_.compact()) {
      const auto bf16 = [&](Region r) { return std::span<uint16_t>(host_.region(b, r).as<uint16_t>(), n); };
      step.update(static_cast<size_t>(b),
                  cpu_optim::CompactBucket{bf16(Region::Working), bf16(Region::M), bf16(Region::V), gradients(grads, b),
                                           gradient_type(), first_index_[b], ranges},
                  adam_step, lr);
      return;
    }
    std::byte* out = delayed_ ? working_next_[b] : working_now_[b];
    if (step.decision().report.skipped && delayed_)  // the next copy is the current one
      std::memcpy(out, working_now_[b], static_cast<size_t>(p_.bucket_bytes[b]));
    step.update(static_cast<size_t>(b), {{region(b, Region::Master), n}, {region(b, Region::M), n}, {region(b, Region::V), n},
                                         gradients(grads, b), gradient_type(), out, p_.precision, ranges},
                adam_step, lr);
    // A skipped step leaves the gradients where they landed: on the working copy, which is then rounded from the
    // unchanged master again, as start-up and resume round it.
    if (step.decision().report.skipped && host_.grad_landing() == memory::HostBuckets::GradLanding::OnWorkingCopy)
      memory::narrow(out, p_.precision, region(b, Region::Master), static_cast<int64_t>(n));
  });
  updated_[b] = worker_->record();
}

void HostOptimizer::queue_updates(const std::vector<int>& order, int64_t adam_step, double lr) {
  for (int b : order) queue_update(step_, b, landing_parity(), adam_step, lr);
}

void HostOptimizer::queue_pending() {
  if (!has_pending_) return;
  for (int b : pending_.order) queue_update(pending_.step, b, pending_.parity, pending_.adam_step, pending_.lr);
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
  for (int b = 0; b < p_.n_buckets; ++b)
    working_now_[b] = host_.on_device(b) ? nullptr : host_.region(b, Region::Working).as<std::byte>();
  if (delayed_) working_next_ = working_spare_;
}

void HostOptimizer::set_pending(int64_t adam_step, double lr, const cpu_optim::StepDecision& decision, std::vector<int> order) {
  if (!delayed_) throw std::logic_error("a pending update needs offload.overlap: delayed");
  pending_ = {adam_step, lr, std::make_shared<const cpu_optim::OptimizerStep>(adamw_, decision), std::move(order), 0};
  has_pending_ = true;
  parity_ = 1;
}

memory::TensorView HostOptimizer::pending_gradients(int b) const {
  if (!has_pending_) throw std::logic_error("no pending update");
  if (device_only_.at(b)) return {nullptr, {p_.bucket_numel(b)}, gradient_type()};  // none: updated in its step
  return {const_cast<void*>(gradients(pending_.parity, b)), {p_.bucket_numel(b)}, gradient_type()};
}

}  // namespace ferry::engine
