// CudaDevice: the Device on a GPU: three CUDA streams, CUDA events, cudaMemcpyAsync between the pinned
// pool and the arena (one cudaMalloc at start-up), host work queued in stream order (cudaLaunchHostFunc).
// Its own methods launch their kernels on the stream directly: every op call on kernels::cuda::CudaKernels,
// and the device AdamW. Built only with CUDA (FERRY_WITH_CUDA).
#pragma once

#ifdef FERRY_WITH_CUDA

#include <cuda_runtime.h>

#include <array>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/device/device.h"
#include "kernels/step_decision.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/ops.h"

namespace ferry::device {

// Launches a one-thread kernel on `stream` that returns once *device_flag (pinned, mapped) is nonzero.
cudaError_t launch_wait_for_flag(int* device_flag, cudaStream_t stream);
// Launches dst[i] = src[i] (overwrite) or dst[i] += src[i] for i < n, src stored as fp32, bf16 or fp16 and
// widened exactly, the sum in fp32 (cuda_device_kernels.cu). cudaErrorInvalidValue for another type.
cudaError_t launch_accumulate(float* dst, const void* src, DType src_type, int64_t n, bool overwrite, cudaStream_t stream);
// Launches one thread that sums stats[0..buckets) in order and writes the step decision (kernels::decide_step,
// as the host decides) to *gate (device memory, read by kernels::cuda::adamw_gated) and *decision (pinned mapped host
// memory).
cudaError_t launch_decide_step(const kernels::cuda::SquaresResult* stats, int64_t buckets, float max_norm,
                               float loss_scale, kernels::cuda::AdamWGate* gate, kernels::StepDecision* decision,
                               cudaStream_t stream);

// The device AdamW's scratch for up to `buckets` buckets: the decision, each bucket's statistics, one sum of
// squares' partials at a time.
int64_t device_adamw_scratch_bytes(int64_t buckets);

class CudaDevice final : public Device {
 public:
  struct Options {
    int ordinal = 0;
    int64_t arena_bytes = 0;
    int host_waits = 4096;  // pinned flags for streams waiting on host events (in flight at once)
  };
  explicit CudaDevice(const Options& options);
  ~CudaDevice() override;

  std::string name() const override;
  DeviceKind kind() const override { return DeviceKind::Cuda; }
  std::unique_ptr<memory::PinnedHostPool> make_host_pool(int64_t bytes) const override;
  const memory::Arena& arena() const override { return arena_; }
  void run(Stream stream, std::string_view label, std::function<void()> work) override;
  void copy(Stream stream, void* dst, const void* src, int64_t bytes, std::string_view label) override;
  EventPtr record(Stream stream) override;
  EventPtr record_timed(Stream stream) override;
  double elapsed_seconds(const EventPtr& from, const EventPtr& to) override;
  void wait(Stream stream, const EventPtr& event, std::string_view label) override;
  EventPtr from_host(std::shared_ptr<HostEvent> event) override;
  void synchronize(const EventPtr& event) override;
  void synchronize() override;
  // Not measured on the CUDA device yet (it would need timing events around every wait): 0.
  double compute_stall_seconds() const override { return 0; }
  int64_t measured_peak_bytes() const override;
  // The scratch of every op and of the device AdamW (cuBLASLt's workspace, CUB's, cuDNN's, the kernels'):
  // nothing is allocated while a step runs. Used by the ops queued after it.
  void bind_workspace(std::byte* data, int64_t bytes) override;
  std::byte* workspace() const { return workspace_; }
  int64_t workspace_bytes() const { return workspace_bytes_; }
  void zero(Stream stream, void* dst, int64_t bytes, std::string_view label) override;
  void accumulate(Stream stream, float* dst, const void* src, DType src_type, int64_t n, bool overwrite,
                  std::string_view label) override;
  // Every op kind in fp32, bf16 and fp16 storage; int32 only for what an op reads (ids, targets, the mask).
  bool supports_op(std::span<const DType> storage, size_t inputs) const override;
  // Queues the op's kernels on the compute stream (scratch from the bound workspace). The loss: the forward
  // writes per-token losses and a one-block kernel their mean into a pinned mapped slot; host work queued
  // right behind it copies the slot into *loss, so *loss holds the mean once the compute stream has passed
  // it (synchronize), and nothing waits inside the step. A dtype its kernels do not compute in throws
  // std::invalid_argument here, at queueing time, naming the label.
  void run_op(const kernels::OpCall& call, float* loss, std::string_view label) override;
  // Queued on the compute stream: each bucket's kernels::cuda::sum_squares into the workspace, one thread deciding the
  // step (launch_decide_step) into device memory, kernels::cuda::adamw_gated on every bucket reading that decision, and
  // host work that copies the decision (written to pinned mapped memory) into *decision: no stall inside the
  // step; *decision holds it once the compute stream has passed it.
  void adamw(std::vector<OptimizerBucket> buckets, const cpu_optim::AdamWHyper& hyper, int64_t step, double lr,
             float max_norm, float loss_scale, cpu_optim::StepDecision* decision, std::string_view label) override;
  void gradient_statistics(std::vector<OptimizerBucket> buckets, cpu_optim::GradStats* stats,
                           std::string_view label) override;
  void adamw_decided(std::vector<OptimizerBucket> buckets, const cpu_optim::AdamWHyper& hyper, int64_t step, double lr,
                     const cpu_optim::StepDecision* decision, std::string_view label) override;

  // The stream the device's own kernels launch on while one of its methods (accumulate, run_op, adamw) queues
  // them, so that the library code an op calls needs no stream argument; null elsewhere (host work queued by
  // run() makes no CUDA call).
  static cudaStream_t current_stream();

  class EventPool;  // the untimed events record() and from_host() take, reused (cuda_device.cpp)

 private:
  struct HostWork;  // what run() queues: the work, kept alive until it has run, with its stream and label
  static void CUDART_CB run_host_work(void* host_work);
  cudaStream_t stream(Stream s) const { return streams_[static_cast<int>(s)]; }
  void check_host_failure();
  void watch();  // the thread that sets a pinned flag once its host event is done

  Options options_;
  std::string name_;
  size_t free_after_start_ = 0;  // cudaMemGetInfo's free bytes once the arena is allocated
  memory::Arena arena_;
  std::array<cudaStream_t, 3> streams_{};
  int* flags_ = nullptr;  // pinned, host_waits of them
  // Per flag, the event from_host last returned for it (recorded behind its wait kernel): the flag is reused only
  // once that kernel has returned, so that neither the old host event's watcher nor the old kernel sees the new wait.
  std::vector<EventPtr> flag_waits_;
  int next_flag_ = 0;
  std::mutex mutex_;  // guards everything below (and next_flag_)
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<HostEvent>, int>> watched_;
  std::string host_failure_;  // the first failure of host work: a host event (from_host) or run()'s work
  std::array<bool, 3> stream_failed_{};  // a stream whose host work failed skips its later host work
  bool stopping_ = false;
  std::thread watcher_;
  std::byte* workspace_ = nullptr;
  int64_t workspace_bytes_ = 0;
  std::shared_ptr<EventPool> events_;

  // Where kernels leave results for the host (the loss's mean, the step decision): a ring of pinned mapped
  // slots, each read by host work queued behind its kernel. A slot is reused kResultSlots results later,
  // long after its host work has run (the executor drains every stream after each micro-batch).
  struct ResultSlot {
    void* host;
    void* device;
  };
  static constexpr int kResultSlots = 1024;
  static constexpr int64_t kResultSlotBytes = 64;
  ResultSlot next_result_slot();
  // `bytes` of consecutive slots (at most the whole ring), wrapping to the ring's start when they would not fit.
  ResultSlot next_result_span(int64_t bytes);
  // The kernels' binding and the slot ring: touched by one op or optimizer step at a time, as the compute
  // stream's work is queued from one thread at a time (Device), so no lock guards them.
  kernels::cuda::CudaKernels kernels_;
  std::byte* results_ = nullptr;  // pinned mapped, kResultSlots * kResultSlotBytes
  std::byte* results_on_device_ = nullptr;  // the same memory as kernels address it
  int next_result_ = 0;
};

}  // namespace ferry::device

#endif  // FERRY_WITH_CUDA
