// CudaDevice: the Device on a GPU: three CUDA streams, CUDA events, cudaMemcpyAsync between the pinned
// pool and the arena (one cudaMalloc at start-up), host work queued in stream order (cudaLaunchHostFunc).
// Its own methods launch their kernels on the stream directly. Built only with CUDA (FERRY_WITH_CUDA).
#pragma once

#ifdef FERRY_WITH_CUDA

#include <cuda_runtime.h>

#include <array>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "engine/device/device.h"

namespace ferry::device {

// Launches a one-thread kernel on `stream` that returns once *device_flag (pinned, mapped) is nonzero.
cudaError_t launch_wait_for_flag(int* device_flag, cudaStream_t stream);
// Launches dst[i] = src[i] (overwrite) or dst[i] += src[i] for i < n, src stored as fp32, bf16 or fp16 and
// widened exactly, the sum in fp32 (cuda_device_kernels.cu). cudaErrorInvalidValue for another type.
cudaError_t launch_accumulate(float* dst, const void* src, DType src_type, int64_t n, bool overwrite, cudaStream_t stream);

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
  std::unique_ptr<memory::PinnedHostPool> make_host_pool(int64_t bytes) const override;
  const memory::Arena& arena() const override { return arena_; }
  void run(Stream stream, std::string label, std::function<void()> work) override;
  void copy(Stream stream, void* dst, const void* src, int64_t bytes, std::string label) override;
  EventPtr record(Stream stream) override;
  EventPtr record_timed(Stream stream) override;
  double elapsed_seconds(const EventPtr& from, const EventPtr& to) override;
  void wait(Stream stream, const EventPtr& event, std::string label) override;
  EventPtr from_host(std::shared_ptr<HostEvent> event) override;
  void synchronize(const EventPtr& event) override;
  void synchronize() override;
  // Not measured on the CUDA device yet (it would need timing events around every wait): 0.
  double compute_stall_seconds() const override { return 0; }
  int64_t measured_peak_bytes() const override;
  // Recorded for the libraries (cuBLASLt, cuDNN, CUB); no kernel uses it yet.
  void bind_workspace(std::byte* data, int64_t bytes) override;
  std::byte* workspace() const { return workspace_; }
  int64_t workspace_bytes() const { return workspace_bytes_; }
  void zero(Stream stream, void* dst, int64_t bytes, std::string label) override;
  void accumulate(Stream stream, float* dst, const void* src, DType src_type, int64_t n, bool overwrite, std::string label) override;
  // No op yet: the CUDA kernels are issue 15's.
  bool supports_op(const models::OpSpec&, std::span<const DType>) const override { return false; }
  void run_op(const models::ModelSpec& spec, const models::OpSpec& op, const models::OpOperands& operands, float loss_weight,
              float* loss, std::string label) override;
  void adamw(std::vector<OptimizerBucket> buckets, const cpu_optim::AdamWHyper& hyper, int64_t step, double lr, float max_norm,
             float loss_scale, cpu_optim::StepDecision* decision, std::string label) override;
  void gradient_statistics(std::vector<OptimizerBucket> buckets, cpu_optim::GradStats* stats, std::string label) override;
  void adamw_decided(std::vector<OptimizerBucket> buckets, const cpu_optim::AdamWHyper& hyper, int64_t step, double lr,
                     const cpu_optim::StepDecision* decision, std::string label) override;

  // The stream the device's own kernels launch on while one of its methods (accumulate, and run_op and
  // adamw once they exist) queues them, so that the library code an op calls needs no stream argument;
  // null elsewhere (host work queued by run() makes no CUDA call).
  static cudaStream_t current_stream();

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
};

}  // namespace ferry::device

#endif  // FERRY_WITH_CUDA
