// CudaDevice: streams and events are CUDA's own. A stream waiting for host work (CPU AdamW) runs a
// one-thread kernel (cuda_device_kernels.cu) that spins on a pinned flag; a watcher thread sets the flag
// once the host event is done (2 when the host work failed, which synchronize() then reports). Host work
// queued by run() is a cudaLaunchHostFunc whose failure is recorded the same way. Ops run on CudaKernels;
// what a kernel computes for the host (the loss, the step decision) lands in pinned mapped memory and is
// handed over by host work queued behind it. Host code only, compiled as C++20 by the host compiler.
#include "engine/device/cuda_device.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

namespace ferry::device {
namespace {

thread_local cudaStream_t tls_stream = nullptr;

// current_stream() is `stream` while the device's own method launching kernels on it runs.
class Launching {
 public:
  explicit Launching(cudaStream_t stream) { tls_stream = stream; }
  ~Launching() { tls_stream = nullptr; }
  Launching(const Launching&) = delete;
  Launching& operator=(const Launching&) = delete;
};

[[noreturn]] void fail(cudaError_t e, const std::string& what) {
  cudaGetLastError();
  throw std::runtime_error(what + ": " + cudaGetErrorString(e));
}

void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) fail(e, what);
}

// The same with the message built only on failure: the calls of a steady step build no string.
template <class What>
requires std::invocable<What>
void check(cudaError_t e, What&& what) {
  if (e != cudaSuccess) fail(e, what());
}

}  // namespace

// Untimed events created once and recorded again and again. An event comes back when its last EventPtr is
// gone: nothing can enqueue a wait for it any more, and the waits enqueued before took its state when they
// were enqueued (cudaStreamWaitEvent), so recording it again changes none of them. Shared by the device and
// its events, so that an event may outlive the device.
class CudaDevice::EventPool {
 public:
  ~EventPool() {
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
  }
  cudaEvent_t take() {
    {
      const std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        const cudaEvent_t e = free_.back();
        free_.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    return e;
  }
  void give_back(cudaEvent_t e) {
    const std::lock_guard lock(mutex_);
    free_.push_back(e);
  }

 private:
  std::mutex mutex_;  // events come back on whichever thread drops them (a CPU worker's wait)
  std::vector<cudaEvent_t> free_;
};

namespace {

struct CudaEvent final : Event {
  cudaEvent_t event = nullptr;
  std::shared_ptr<CudaDevice::EventPool> pool;  // where an untimed event goes back; null: destroyed (timed)
  ~CudaEvent() override {
    if (event && pool) pool->give_back(event);
    else if (event) cudaEventDestroy(event);
  }
};

}  // namespace

cudaStream_t CudaDevice::current_stream() { return tls_stream; }

CudaDevice::CudaDevice(const Options& o)
    : options_(o), arena_((check(cudaSetDevice(o.ordinal), fmt::format("cudaSetDevice({})", o.ordinal)), memory::Arena::Backing::Cuda),
                          o.arena_bytes) {
  if (o.host_waits < 1)
    throw std::invalid_argument(fmt::format("CudaDevice: host_waits is {}; it must be at least 1", o.host_waits));
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, o.ordinal), "cudaGetDeviceProperties");
  name_ = fmt::format("cuda:{} ({}, {:.1f} GiB)", o.ordinal, prop.name, prop.totalGlobalMem / double(int64_t(1) << 30));
  for (auto& s : streams_) check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  check(cudaHostAlloc(reinterpret_cast<void**>(&flags_), sizeof(int) * static_cast<size_t>(o.host_waits), cudaHostAllocMapped),
        "cudaHostAlloc (host-wait flags)");
  flag_waits_.resize(static_cast<size_t>(o.host_waits));
  check(cudaHostAlloc(reinterpret_cast<void**>(&results_), static_cast<size_t>(kResultSlots * kResultSlotBytes), cudaHostAllocMapped),
        "cudaHostAlloc (result slots)");
  check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&results_on_device_), results_, 0), "cudaHostGetDevicePointer (result slots)");
  size_t total = 0;
  check(cudaMemGetInfo(&free_after_start_, &total), "cudaMemGetInfo");
  events_ = std::make_shared<EventPool>();
  watcher_ = std::thread([this] { watch(); });
}

int64_t CudaDevice::measured_peak_bytes() const {
  // Anything allocated on the device after start-up (a library workspace, a stray cudaMalloc) shows
  // as less free memory than right after the arena was allocated.
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return arena_.size();
  return arena_.size() + std::max<int64_t>(0, static_cast<int64_t>(free_after_start_) - static_cast<int64_t>(free));
}

CudaDevice::~CudaDevice() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  watcher_.join();
  for (auto& s : streams_)
    if (s) cudaStreamSynchronize(s), cudaStreamDestroy(s);
  if (flags_) cudaFreeHost(flags_);
  if (results_) cudaFreeHost(results_);
}

std::string CudaDevice::name() const { return name_; }

std::unique_ptr<memory::PinnedHostPool> CudaDevice::make_host_pool(int64_t bytes) const {
  return std::make_unique<memory::PinnedHostPool>(bytes, memory::PinnedHostPool::Options{.cuda = true, .lock = false});
}

struct CudaDevice::HostWork {
  CudaDevice* device;
  Stream stream;
  std::string label;
  std::function<void()> work;
};

void CudaDevice::run(Stream s, std::string_view label, std::function<void()> work) {
  // Owned by the host function once CUDA has accepted it: it deletes it when it has run (also when earlier
  // host work failed; only a device fault, which ends the run, leaves it unrun).
  auto host_work = std::make_unique<HostWork>(HostWork{this, s, std::string(label), std::move(work)});
  check(cudaLaunchHostFunc(stream(s), &CudaDevice::run_host_work, host_work.get()),
        [&] { return fmt::format("{}: {} (cudaLaunchHostFunc)", to_string(s), label); });
  host_work.release();
}

// On the CUDA runtime's callback thread, in stream order. Nothing may escape it (CUDA would terminate), and
// it makes no CUDA call: a failure is recorded for synchronize(), like a failed host event.
void CUDART_CB CudaDevice::run_host_work(void* p) {
  const std::unique_ptr<HostWork> w(static_cast<HostWork*>(p));
  CudaDevice& dev = *w->device;
  const int s = static_cast<int>(w->stream);
  {
    std::lock_guard lock(dev.mutex_);
    if (dev.stream_failed_[s]) return;  // the stream failed: later host work is skipped, as on the host device
  }
  std::string error;
  try {
    w->work();
    return;
  } catch (const std::exception& e) {
    error = fmt::format("{}: {}: {}", to_string(w->stream), w->label, e.what());
  } catch (...) {
    error = fmt::format("{}: {}: an exception that is not a std::exception", to_string(w->stream), w->label);
  }
  std::lock_guard lock(dev.mutex_);
  dev.stream_failed_[s] = true;
  if (dev.host_failure_.empty()) dev.host_failure_ = std::move(error);
}

void CudaDevice::bind_workspace(std::byte* data, int64_t bytes) {
  if (bytes < 0 || (!data && bytes != 0))
    throw std::invalid_argument(fmt::format("bind_workspace: {} bytes at {}: a workspace needs a size >= 0 and an address", bytes,
                                            static_cast<void*>(data)));
  workspace_ = data;
  workspace_bytes_ = data ? bytes : 0;
}

void CudaDevice::copy(Stream s, void* dst, const void* src, int64_t bytes, std::string_view label) {
  if (s == Stream::Compute) throw std::logic_error("copies go on the h2d or d2h stream");
  check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, stream(s)),
        [&] { return fmt::format("{}: {} (cudaMemcpyAsync of {} bytes)", to_string(s), label, bytes); });
}

EventPtr CudaDevice::record(Stream s) {
  auto e = std::make_shared<CudaEvent>();
  e->event = events_->take(), e->pool = events_;
  check(cudaEventRecord(e->event, stream(s)), [s] { return fmt::format("cudaEventRecord on {}", to_string(s)); });
  return e;
}

EventPtr CudaDevice::record_timed(Stream s) {
  auto e = std::make_shared<CudaEvent>();
  check(cudaEventCreate(&e->event), "cudaEventCreate (timed)");
  check(cudaEventRecord(e->event, streams_[static_cast<int>(s)]), fmt::format("cudaEventRecord on {}", to_string(s)));
  return e;
}

double CudaDevice::elapsed_seconds(const EventPtr& from, const EventPtr& to) {
  const auto* a = dynamic_cast<const CudaEvent*>(from.get());
  const auto* b = dynamic_cast<const CudaEvent*>(to.get());
  if (!a || !b) throw std::logic_error("an event from another device was given to the CUDA device");
  check(cudaEventSynchronize(b->event), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a->event, b->event), "cudaEventElapsedTime (were both events recorded with timing?)");
  return ms * 1e-3;
}

void CudaDevice::wait(Stream s, const EventPtr& event, std::string_view label) {
  const auto* e = dynamic_cast<const CudaEvent*>(event.get());
  if (!e) throw std::logic_error("an event from another device was given to the CUDA device");
  check(cudaStreamWaitEvent(stream(s), e->event, 0),
        [&] { return fmt::format("{}: wait for {}", to_string(s), label); });
}

EventPtr CudaDevice::from_host(std::shared_ptr<HostEvent> host) {
  // A flag and a spinning kernel on a private stream, then an event on that stream: any stream can
  // wait for it like for any other event.
  int slot = 0;
  {
    std::lock_guard lock(mutex_);
    slot = next_flag_;
    next_flag_ = (next_flag_ + 1) % options_.host_waits;
  }
  // A flag still in use (more than host_waits waits in flight) is waited for: its kernel returns once its host
  // event is done, which does not depend on this wait.
  EventPtr& last_wait = flag_waits_[static_cast<size_t>(slot)];
  if (last_wait)
    check(cudaEventSynchronize(static_cast<const CudaEvent&>(*last_wait).event),
          "cudaEventSynchronize (a host-wait flag's previous wait)");
  flags_[slot] = 0;
  int* device_flag = nullptr;
  check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_flag), flags_ + slot, 0), "cudaHostGetDevicePointer");
  static thread_local cudaStream_t host_wait_stream = nullptr;
  if (!host_wait_stream) check(cudaStreamCreateWithFlags(&host_wait_stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  check(launch_wait_for_flag(device_flag, host_wait_stream), "launching the host-wait kernel");
  auto e = std::make_shared<CudaEvent>();
  e->event = events_->take(), e->pool = events_;
  check(cudaEventRecord(e->event, host_wait_stream), "cudaEventRecord (host wait)");
  last_wait = e;  // kept, so that its event is not recorded again before the flag's next use has waited for it
  {
    std::lock_guard lock(mutex_);
    watched_.emplace_back(std::move(host), slot);
  }
  cv_.notify_all();
  return e;
}

void CudaDevice::watch() {
  for (;;) {
    std::pair<std::shared_ptr<HostEvent>, int> item;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !watched_.empty(); });
      if (watched_.empty()) return;
      item = std::move(watched_.front());
      watched_.pop_front();
    }
    const std::string error = item.first->wait();
    if (!error.empty()) {
      std::lock_guard lock(mutex_);
      if (host_failure_.empty()) host_failure_ = error;
    }
    reinterpret_cast<volatile int*>(flags_)[item.second] = error.empty() ? 1 : 2;
  }
}

void CudaDevice::check_host_failure() {
  std::lock_guard lock(mutex_);
  if (!host_failure_.empty()) throw std::runtime_error(host_failure_);
}

void CudaDevice::synchronize(const EventPtr& event) {
  const auto* e = dynamic_cast<const CudaEvent*>(event.get());
  if (!e) throw std::logic_error("an event from another device was given to the CUDA device");
  check(cudaEventSynchronize(e->event), "cudaEventSynchronize");
  check_host_failure();
}

void CudaDevice::synchronize() {
  for (Stream s : {Stream::Compute, Stream::H2D, Stream::D2H})
    check(cudaStreamSynchronize(stream(s)), fmt::format("{} stream", to_string(s)));
  check_host_failure();
}

void CudaDevice::zero(Stream s, void* dst, int64_t bytes, std::string_view label) {
  check(cudaMemsetAsync(dst, 0, static_cast<size_t>(bytes), stream(s)),
        [&] { return fmt::format("{}: {}", to_string(s), label); });
}

void CudaDevice::accumulate(Stream s, float* dst, const void* src, DType src_type, int64_t n, bool overwrite,
                            std::string_view label) {
  if (src_type != DType::F32 && src_type != DType::BF16 && src_type != DType::F16)
    throw std::invalid_argument(fmt::format("{}: {}: accumulate reads fp32, bf16 or fp16, not {}", to_string(s), label, to_string(src_type)));
  const Launching on(stream(s));
  check(launch_accumulate(dst, src, src_type, n, overwrite, current_stream()), [&] {
    return fmt::format("{}: {} (accumulate of {} {} elements)", to_string(s), label, n, to_string(src_type));
  });
}

CudaDevice::ResultSlot CudaDevice::next_result_slot() {
  const int64_t offset = static_cast<int64_t>(next_result_) * kResultSlotBytes;
  next_result_ = (next_result_ + 1) % kResultSlots;
  return {results_ + offset, results_on_device_ + offset};
}

CudaDevice::ResultSlot CudaDevice::next_result_span(int64_t bytes) {
  const int slots = static_cast<int>((bytes + kResultSlotBytes - 1) / kResultSlotBytes);
  if (slots > kResultSlots)
    throw std::runtime_error(fmt::format("CudaDevice: {} bytes of results at once; the ring holds {}", bytes, kResultSlots * kResultSlotBytes));
  if (next_result_ + slots > kResultSlots) next_result_ = 0;
  const int64_t offset = static_cast<int64_t>(next_result_) * kResultSlotBytes;
  next_result_ = (next_result_ + slots) % kResultSlots;
  return {results_ + offset, results_on_device_ + offset};
}

bool CudaDevice::supports_op(std::span<const DType> storage, size_t inputs) const {
  for (size_t k = 0; k < storage.size(); ++k) {
    if (storage[k] == DType::I32) {
      if (k >= inputs) return false;  // ids are read, never written
      continue;
    }
    if (storage[k] != DType::F32 && storage[k] != DType::BF16 && storage[k] != DType::F16) return false;
  }
  return true;
}

void CudaDevice::run_op(const kernels::OpCall& call, float* loss, std::string_view label) {
  const ResultSlot mean = loss ? next_result_slot() : ResultSlot{nullptr, nullptr};
  if (loss) std::memset(mean.host, 0, sizeof(float));  // what *loss gets from an op that is not the loss's forward
  kernels_.bind(stream(Stream::Compute), workspace_, workspace_bytes_, static_cast<float*>(mean.device));
  {
    const Launching on(stream(Stream::Compute));
    try {
      kernels::run_call(call, kernels_);  // its return (the host float) stays 0 here
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("{}: {}", label, e.what()));
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("{}: {}", label, e.what()));
    }
  }
  if (loss)
    run(Stream::Compute, fmt::format("{}: the loss to the host", label),
        [loss, from = static_cast<const float*>(mean.host)] { std::memcpy(loss, from, sizeof(float)); });
}

namespace {

constexpr int64_t kAlign = 256;
int64_t aligned(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// The largest scratch kernels::cuda::sum_squares takes: its grid is clamped, so a huge n reaches it.
int64_t max_sum_squares_scratch() {
  return static_cast<int64_t>(kernels::cuda::sum_squares_scratch_bytes(int64_t{1} << 40));
}

// The device AdamW's workspace: [gate][statistics of each bucket][sum of squares' partials].
struct AdamWScratch {
  kernels::cuda::AdamWGate* gate;
  kernels::cuda::SquaresResult* stats;
  std::byte* partials;
};

AdamWScratch adamw_scratch(std::byte* workspace, int64_t buckets) {
  return {reinterpret_cast<kernels::cuda::AdamWGate*>(workspace),
          reinterpret_cast<kernels::cuda::SquaresResult*>(workspace + kAlign),
          workspace + kAlign + aligned(buckets * int64_t{sizeof(kernels::cuda::SquaresResult)})};
}

void check_bucket(const Device::OptimizerBucket& b, size_t i) {
  const auto floating = [](DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; };
  if (b.numel < 0 || !floating(b.grad_type) || (b.working && !floating(b.working_type)) ||
      (b.numel > 0 && (!b.master || !b.m || !b.v || !b.grad)))
    throw std::invalid_argument(fmt::format("adamw: bucket {} ({} elements, gradients {}, working copy {}): AdamW takes fp32, bf16 "
                                            "or fp16 gradients and working copy, and master, m, v and gradients for every element",
                                            i, b.numel, to_string(b.grad_type), b.working ? to_string(b.working_type) : "none"));
}

// AdamW on one bucket under the gate (read when the kernels run), range by range with each parameter group's
// lr multiplier and weight decay, as cpu_optim::CpuAdamW::step applies them (Bucket::ranges).
void adamw_bucket(const Device::OptimizerBucket& k, const cpu_optim::AdamWHyper& hyper, int64_t step, double lr,
                  const kernels::cuda::AdamWGate* gate, cudaStream_t s, std::string_view label, size_t bucket) {
  const std::vector<cpu_optim::HyperRange> whole{{0, static_cast<size_t>(k.numel), 1.0, hyper.weight_decay}};
  const size_t grad_bytes = dtype_bytes(k.grad_type), working_bytes = k.working ? dtype_bytes(k.working_type) : 0;
  for (const cpu_optim::HyperRange& r : k.ranges.empty() ? whole : k.ranges) {
    cpu_optim::AdamWHyper h = hyper;
    h.weight_decay = r.weight_decay;
    // grad_scale 1: the gate's replaces it when the kernel runs; seed 0, CpuAdamW's default.
    const kernels::AdamWCoefficients c = cpu_optim::adamw_coefficients(h, step, lr * r.lr_scale, 1.0f, 0);
    void* working = k.working ? static_cast<std::byte*>(k.working) + r.begin * working_bytes : nullptr;
    check(kernels::cuda::adamw_gated(k.master + r.begin, k.m + r.begin, k.v + r.begin,
                                     static_cast<const std::byte*>(k.grad) + r.begin * grad_bytes, k.grad_type, working,
                                     k.working_type, false, static_cast<int64_t>(r.end - r.begin), c, gate, s),
          [&] { return fmt::format("{}: adamw of bucket {}", label, bucket); });
  }
}

}  // namespace

int64_t device_adamw_scratch_bytes(int64_t buckets) {
  return kAlign + aligned(buckets * int64_t{sizeof(kernels::cuda::SquaresResult)}) + max_sum_squares_scratch();
}

void CudaDevice::adamw(std::vector<OptimizerBucket> buckets, const cpu_optim::AdamWHyper& hyper, int64_t step,
                       double lr, float max_norm, float loss_scale, cpu_optim::StepDecision* decision,
                       std::string_view label) {
  if (step < 1 || !(loss_scale > 0) || !decision)
    throw std::invalid_argument(fmt::format("{}: adamw: step {} (counts from 1), loss scale {} (> 0), decision {} (needed)", label, step,
                                            loss_scale, static_cast<void*>(decision)));
  for (size_t i = 0; i < buckets.size(); ++i) check_bucket(buckets[i], i);
  const auto n = static_cast<int64_t>(buckets.size());
  if (device_adamw_scratch_bytes(n) > workspace_bytes_)
    throw std::runtime_error(fmt::format("{}: the device AdamW over {} buckets needs {} bytes of workspace; the bound one holds {}", label,
                                         n, device_adamw_scratch_bytes(n), workspace_bytes_));
  const AdamWScratch ws = adamw_scratch(workspace_, n);
  const ResultSlot slot = next_result_slot();
  const Launching on(stream(Stream::Compute));
  const cudaStream_t s = current_stream();
  for (int64_t b = 0; b < n; ++b) {  // each bucket's statistics, then the decision from all of them
    const OptimizerBucket& k = buckets[static_cast<size_t>(b)];
    check(kernels::cuda::sum_squares(ws.stats + b, k.grad, k.numel, ws.partials, k.grad_type, s),
          [&] { return fmt::format("{}: sum of squares of bucket {}", label, b); });
  }
  auto* decided = static_cast<kernels::StepDecision*>(slot.device);
  check(launch_decide_step(ws.stats, n, max_norm, loss_scale, ws.gate, decided, s),
        [&] { return fmt::format("{}: the step decision", label); });
  for (size_t b = 0; b < buckets.size(); ++b) adamw_bucket(buckets[b], hyper, step, lr, ws.gate, s, label, b);
  run(Stream::Compute, fmt::format("{}: the step decision to the host", label),
      [decision, from = slot.host] { std::memcpy(decision, from, sizeof(*decision)); });
}

// The device tier's half of a step the host decides: each bucket's sum of squares and inf/nan count into
// the workspace, copied to pinned result slots, handed to the host by host work behind them.
void CudaDevice::gradient_statistics(std::vector<OptimizerBucket> buckets, cpu_optim::GradStats* stats,
                                     std::string_view label) {
  for (size_t i = 0; i < buckets.size(); ++i) check_bucket(buckets[i], i);
  const auto n = static_cast<int64_t>(buckets.size());
  if (device_adamw_scratch_bytes(n) > workspace_bytes_)
    throw std::runtime_error(fmt::format("{}: the statistics of {} buckets need {} bytes of workspace; the bound one holds {}", label, n,
                                         device_adamw_scratch_bytes(n), workspace_bytes_));
  const AdamWScratch ws = adamw_scratch(workspace_, n);
  const int64_t bytes = n * int64_t{sizeof(kernels::cuda::SquaresResult)};
  const ResultSlot out = next_result_span(bytes);
  const Launching on(stream(Stream::Compute));
  const cudaStream_t s = current_stream();
  for (int64_t b = 0; b < n; ++b) {
    const OptimizerBucket& k = buckets[static_cast<size_t>(b)];
    check(kernels::cuda::sum_squares(ws.stats + b, k.grad, k.numel, ws.partials, k.grad_type, s),
          [&] { return fmt::format("{}: sum of squares of bucket {}", label, b); });
  }
  check(cudaMemcpyAsync(out.host, ws.stats, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, s),
        [&] { return fmt::format("{}: statistics to the host", label); });
  run(Stream::Compute, fmt::format("{}: statistics to the host", label),
      [stats, from = static_cast<const kernels::cuda::SquaresResult*>(out.host), n] {
        for (int64_t b = 0; b < n; ++b) stats[b] = cpu_optim::GradStats{from[b].sum, from[b].nonfinite == 0};
      });
}

// The device tier's AdamW under the host's decision: host work in stream order turns it into the gate the
// kernels read (pinned mapped memory), then every bucket is updated as adamw() updates it.
void CudaDevice::adamw_decided(std::vector<OptimizerBucket> buckets, const cpu_optim::AdamWHyper& hyper, int64_t step,
                               double lr, const cpu_optim::StepDecision* decision, std::string_view label) {
  if (step < 1 || !decision)
    throw std::invalid_argument(fmt::format("{}: adamw: step {} (counts from 1), decision {} (needed)", label, step, static_cast<const void*>(decision)));
  for (size_t i = 0; i < buckets.size(); ++i) check_bucket(buckets[i], i);
  const ResultSlot gate = next_result_slot();
  run(Stream::Compute, fmt::format("{}: the host's decision", label), [decision, to = gate.host] {
    const kernels::cuda::AdamWGate g{decision->grad_scale, decision->report.skipped ? 1u : 0u};
    std::memcpy(to, &g, sizeof(g));
  });
  const Launching on(stream(Stream::Compute));
  const cudaStream_t s = current_stream();
  for (size_t b = 0; b < buckets.size(); ++b)
    adamw_bucket(buckets[b], hyper, step, lr, static_cast<const kernels::cuda::AdamWGate*>(gate.device), s, label, b);
}

}  // namespace ferry::device
