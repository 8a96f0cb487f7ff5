// HostDevice: a simulated GPU on the CPU that really executes: the arena is a capped host allocation,
// each stream is an in-order worker thread, events are real completion signals, and copies really move
// bytes between the pinned pool and the arena, optionally throttled to a link bandwidth so that overlap
// and stalls behave as over PCIe.
#pragma once

#include <array>
#include <memory>

#include "engine/device/device.h"
#include "engine/device/trace.h"
#include "engine/device/work_queue.h"

namespace ferry::device {

class HostDevice final : public Device {
 public:
  struct Options {
    int64_t arena_bytes = 0;
    double link_gbps = 0;     // per direction, GB/s (1e9 bytes); 0: copies at memcpy speed
    int compute_threads = 0;  // oneDNN/OpenMP threads of the compute stream; 0: leave the default
    Trace* trace = nullptr;   // null: no trace
    double d2h_link_gbps = -1;  // a device-to-host link unlike the other direction (tests of late gradients); < 0: link_gbps
  };
  explicit HostDevice(const Options& options);
  ~HostDevice() override;

  std::string name() const override;
  DeviceKind kind() const override { return DeviceKind::Host; }
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
  double compute_stall_seconds() const override;
  // The compute stream's thread takes oneDNN's scratchpads (kernels::cpu::Scratch::Library) from it.
  void bind_workspace(std::byte* data, int64_t bytes) override;
  int64_t measured_peak_bytes() const override { return arena_.touched_bytes(); }
  void zero(Stream stream, void* dst, int64_t bytes, std::string_view label) override;
  void accumulate(Stream stream, float* dst, const void* src, DType src_type, int64_t n, bool overwrite,
                  std::string_view label) override;
  // Every op with its tensors in fp32, bf16 or fp16 (widened to fp32 around the CPU math), reading int32 ids.
  bool supports_op(std::span<const DType> storage, size_t inputs) const override;
  void run_op(const kernels::OpCall& call, float* loss, std::string_view label) override;
  void adamw(std::vector<OptimizerBucket> buckets, const cpu_optim::AdamWHyper& hyper, int64_t step, double lr,
             float max_norm, float loss_scale, cpu_optim::StepDecision* decision, std::string_view label) override;
  void gradient_statistics(std::vector<OptimizerBucket> buckets, cpu_optim::GradStats* stats,
                           std::string_view label) override;
  void adamw_decided(std::vector<OptimizerBucket> buckets, const cpu_optim::AdamWHyper& hyper, int64_t step, double lr,
                     const cpu_optim::StepDecision* decision, std::string_view label) override;

 private:
  // The CPU AdamW kernels for these hyper-parameters, made on first use.
  const cpu_optim::CpuAdamW& adamw_kernels(const cpu_optim::AdamWHyper& hyper);
  WorkQueue& queue(Stream s) { return *queues_[static_cast<int>(s)]; }
  Options options_;
  memory::Arena arena_;
  // The CPU AdamW kernels of device-side AdamW, one per hyper-parameters seen; declared before the queues so
  // that they outlive the tasks queued on them.
  std::vector<std::unique_ptr<cpu_optim::CpuAdamW>> adamw_kernels_;
  std::array<std::unique_ptr<WorkQueue>, 3> queues_;
  std::unique_ptr<WorkQueue> host_waits_;  // from_host's waits, in the order they were asked for (as on a GPU)
};

}  // namespace ferry::device
