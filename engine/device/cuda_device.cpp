// CudaDevice: streams and events are CUDA's own. A stream waiting for host work (CPU AdamW) runs a
// one-thread kernel (cuda_device_kernels.cu) that spins on a pinned flag; a watcher thread sets the flag
// once the host event is done (2 when the host work failed, which synchronize() then reports). Host work
// queued by run() is a cudaLaunchHostFunc whose failure is recorded the same way. Host code only,
// compiled as C++20 by the host compiler.
#include "engine/device/cuda_device.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <stdexcept>

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

void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(what + ": " + cudaGetErrorString(e));
  }
}

struct CudaEvent final : Event {
  cudaEvent_t event = nullptr;
  ~CudaEvent() override {
    if (event) cudaEventDestroy(event);
  }
};

}  // namespace

cudaStream_t CudaDevice::current_stream() { return tls_stream; }

CudaDevice::CudaDevice(const Options& o)
    : options_(o), arena_((check(cudaSetDevice(o.ordinal), fmt::format("cudaSetDevice({})", o.ordinal)), memory::Arena::Backing::Cuda),
                          o.arena_bytes) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, o.ordinal), "cudaGetDeviceProperties");
  name_ = fmt::format("cuda:{} ({}, {:.1f} GiB)", o.ordinal, prop.name, prop.totalGlobalMem / double(int64_t(1) << 30));
  for (auto& s : streams_) check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  check(cudaHostAlloc(reinterpret_cast<void**>(&flags_), sizeof(int) * static_cast<size_t>(o.host_waits), cudaHostAllocMapped),
        "cudaHostAlloc (host-wait flags)");
  size_t total = 0;
  check(cudaMemGetInfo(&free_after_start_, &total), "cudaMemGetInfo");
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

void CudaDevice::run(Stream s, std::string label, std::function<void()> work) {
  // Owned by the host function once CUDA has accepted it: it deletes it when it has run (also when earlier
  // host work failed; only a device fault, which ends the run, leaves it unrun).
  auto host_work = std::make_unique<HostWork>(HostWork{this, s, std::move(label), std::move(work)});
  const std::string what = fmt::format("{}: {} (cudaLaunchHostFunc)", to_string(s), host_work->label);
  check(cudaLaunchHostFunc(stream(s), &CudaDevice::run_host_work, host_work.get()), what);
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

void CudaDevice::copy(Stream s, void* dst, const void* src, int64_t bytes, std::string label) {
  if (s == Stream::Compute) throw std::logic_error("copies go on the h2d or d2h stream");
  check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, stream(s)),
        fmt::format("{}: {} (cudaMemcpyAsync of {} bytes)", to_string(s), label, bytes));
}

EventPtr CudaDevice::record(Stream s) {
  auto e = std::make_shared<CudaEvent>();
  check(cudaEventCreateWithFlags(&e->event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  check(cudaEventRecord(e->event, stream(s)), fmt::format("cudaEventRecord on {}", to_string(s)));
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

void CudaDevice::wait(Stream s, const EventPtr& event, std::string label) {
  const auto* e = dynamic_cast<const CudaEvent*>(event.get());
  if (!e) throw std::logic_error("an event from another device was given to the CUDA device");
  check(cudaStreamWaitEvent(stream(s), e->event, 0), fmt::format("{}: wait for {}", to_string(s), label));
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
  flags_[slot] = 0;
  int* device_flag = nullptr;
  check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_flag), flags_ + slot, 0), "cudaHostGetDevicePointer");
  static thread_local cudaStream_t host_wait_stream = nullptr;
  if (!host_wait_stream) check(cudaStreamCreateWithFlags(&host_wait_stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  check(launch_wait_for_flag(device_flag, host_wait_stream), "launching the host-wait kernel");
  auto e = std::make_shared<CudaEvent>();
  check(cudaEventCreateWithFlags(&e->event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  check(cudaEventRecord(e->event, host_wait_stream), "cudaEventRecord (host wait)");
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

// The ops and device AdamW need Ferry's CUDA kernels (issue 7); until they exist these refuse clearly
// (the trainer refuses device: cuda before any of them could be reached).
namespace {
[[noreturn]] void needs_kernels(const std::string& what) {
  throw std::logic_error("the CUDA device cannot run " + what + " yet: Ferry's CUDA kernels are not built (issue 7)");
}
}  // namespace

void CudaDevice::zero(Stream s, void* dst, int64_t bytes, std::string label) {
  check(cudaMemsetAsync(dst, 0, static_cast<size_t>(bytes), stream(s)), fmt::format("{}: {}", to_string(s), label));
}

void CudaDevice::accumulate(Stream s, float* dst, const void* src, DType src_type, int64_t n, bool overwrite, std::string label) {
  if (src_type != DType::F32 && src_type != DType::BF16 && src_type != DType::F16)
    throw std::invalid_argument(fmt::format("{}: {}: accumulate reads fp32, bf16 or fp16, not {}", to_string(s), label, to_string(src_type)));
  const Launching on(stream(s));
  check(launch_accumulate(dst, src, src_type, n, overwrite, current_stream()),
        fmt::format("{}: {} (accumulate of {} {} elements)", to_string(s), label, n, to_string(src_type)));
}

void CudaDevice::run_op(const models::ModelSpec&, const models::OpSpec&, const models::OpOperands&, float, float*, std::string label) {
  needs_kernels(label);
}

void CudaDevice::adamw(std::vector<OptimizerBucket>, const cpu_optim::AdamWHyper&, int64_t, double, float, float, cpu_optim::StepDecision*,
                       std::string label) {
  needs_kernels(label);
}

void CudaDevice::gradient_statistics(std::vector<OptimizerBucket>, cpu_optim::GradStats*, std::string label) { needs_kernels(label); }

void CudaDevice::adamw_decided(std::vector<OptimizerBucket>, const cpu_optim::AdamWHyper&, int64_t, double, const cpu_optim::StepDecision*,
                               std::string label) {
  needs_kernels(label);
}

}  // namespace ferry::device
