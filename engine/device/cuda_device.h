// CudaDevice: the Device on a GPU: three CUDA streams, CUDA events, cudaMemcpyAsync between the pinned
// pool and the arena (one cudaMalloc at start-up). Compute work launches its kernels on the stream it is
// queued on (current_stream()). Built only with CUDA (FERRY_WITH_CUDA).
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
  void zero(Stream stream, void* dst, int64_t bytes, std::string label) override;
  void accumulate(Stream stream, float* dst, const void* src, DType src_type, int64_t n, bool overwrite, std::string label) override;
  // No op yet: the CUDA kernels are issue 15's.
  bool supports_op(const models::OpSpec&, std::span<const DType>) const override { return false; }
  void run_op(const models::ModelSpec& spec, const models::OpSpec& op, const models::OpOperands& operands, float loss_weight,
              float* loss, std::string label) override;
  void adamw(std::vector<OptimizerBucket> buckets, const cpu_optim::AdamWHyper& hyper, int64_t step, double lr, float max_norm,
             float loss_scale, cpu_optim::StepDecision* decision, std::string label) override;

  // The stream the work being queued by run() launches on.
  static cudaStream_t current_stream();

 private:
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
  std::string host_failure_;
  bool stopping_ = false;
  std::thread watcher_;
};

}  // namespace ferry::device

#endif  // FERRY_WITH_CUDA
