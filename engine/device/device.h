// Device: where a step's compute and copies run. Three in-order streams (compute, host-to-device,
// device-to-host) ordered against each other only by events, and the one arena every device tensor lives
// in. Implementations: HostDevice (a simulated GPU on the CPU, config `device: cpu`) and, with a GPU,
// the CUDA device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cpu_optim/adamw.h"
#include "engine/device/work_queue.h"
#include "kernels/op_call.h"
#include "memory/arena.h"
#include "memory/pinned_pool.h"

namespace ferry::device {

enum class Stream { Compute, H2D, D2H };
const char* to_string(Stream stream);

enum class DeviceKind { Host, Cuda };

// A point in one stream's work: done once everything queued on that stream before it has finished.
class Event {
 public:
  virtual ~Event() = default;
};
using EventPtr = std::shared_ptr<Event>;

class Device {
 public:
  virtual ~Device() = default;

  virtual std::string name() const = 0;
  virtual DeviceKind kind() const = 0;
  // Host memory the copy streams move at full speed (cudaHostAlloc'd on a GPU; page-aligned on the host
  // device), allocated once at start-up and carved: every host buffer a copy reads or writes is from one.
  virtual std::unique_ptr<memory::PinnedHostPool> make_host_pool(int64_t bytes) const = 0;
  // The arena: allocated once at construction; nothing else is ever allocated on the device.
  virtual const memory::Arena& arena() const = 0;

  // Queues host code on a stream: `work` runs on a thread of the device's (the host device: the stream's
  // worker; the CUDA device: the CUDA runtime's callback thread, via cudaLaunchHostFunc) once everything
  // queued on the stream before it has finished, and work queued after it waits for it. `label` names it
  // in errors and traces ("h.0.attn.c_attn.fwd"). Every method reads its label during the call and copies what
  // it keeps, so a caller passes the same long-lived strings every step and builds none. Both devices promise
  // the same: an exception thrown by `work` does not reach the caller; it fails the stream, later host work on it is
  // skipped, and synchronize() throws it, naming the stream and the label. `work` must make no CUDA call (CUDA forbids
  // them in host functions): a device's kernels are queued by its own methods (zero, accumulate, run_op,
  // adamw), never from host work.
  virtual void run(Stream stream, std::string_view label, std::function<void()> work) = 0;
  // Queues a copy between pinned host memory and the arena on the H2D or D2H stream. Thread-safe.
  virtual void copy(Stream stream, void* dst, const void* src, int64_t bytes, std::string_view label) = 0;
  // Cheap enough for every copy, not meant for every op: the executor records only the events that something
  // waits for (the CUDA device reuses its events: one whose last EventPtr is gone is recorded again).
  virtual EventPtr record(Stream stream) = 0;
  // An event that also records when the stream reached it, and the seconds between two such events of one
  // stream once both are done (CUDA events with timing; on the host device, the stream thread's clock):
  // how ops are profiled on the device itself.
  virtual EventPtr record_timed(Stream stream) = 0;
  virtual double elapsed_seconds(const EventPtr& from, const EventPtr& to) = 0;
  // Work queued on `stream` after this waits for `event`.
  virtual void wait(Stream stream, const EventPtr& event, std::string_view label) = 0;
  // An event of this device that is done when a host event is (e.g. CPU AdamW has updated a bucket), so
  // that a stream can wait for host work. A failed host event fails the streams that wait for it.
  virtual EventPtr from_host(std::shared_ptr<HostEvent> event) = 0;
  // The calling thread waits for `event`; throws if work before it failed.
  virtual void synchronize(const EventPtr& event) = 0;
  // The calling thread waits for every stream; throws the first failure.
  virtual void synchronize() = 0;
  // Seconds the compute stream has spent waiting for events (stalls), since construction.
  virtual double compute_stall_seconds() const = 0;
  // The plan's workspace (offload::DeviceTensor::Kind::Workspace, in the arena, alive the whole step): the
  // scratch the device's libraries take while an op runs, so that none of them allocates. The host
  // device's compute stream takes oneDNN's scratchpads from it (an op needing more fails, saying so); the
  // CUDA device keeps it for cuBLASLt, cuDNN and CUB (engine/ops/op_workspace.h sizes it for a model).
  // Called before the ops that use it are queued; nullptr (0 bytes) unbinds it.
  virtual void bind_workspace(std::byte* data, int64_t bytes) = 0;
  // Device memory really used so far, measured, not planned: on the host device the arena's highest byte
  // ever written; on a GPU the arena plus whatever else was allocated on it since start-up.
  virtual int64_t measured_peak_bytes() const = 0;

  // The compute stream's work, all in the arena. Each names itself (label) in errors and the trace. It is
  // queued from one thread at a time (the step's): the CUDA device takes no lock for it.
  virtual void zero(Stream stream, void* dst, int64_t bytes, std::string_view label) = 0;
  // dst = src (overwrite) or dst += src over n elements: src stored as src_type (fp32, bf16, fp16) and
  // widened, the sum in fp32 (gradients summed over micro-batches).
  virtual void accumulate(Stream stream, float* dst, const void* src, DType src_type, int64_t n, bool overwrite,
                          std::string_view label) = 0;
  // Whether this device runs an op whose tensors are stored as `storage`: its `inputs` inputs, then its
  // outputs. A backend is brought up op by op, and the Executor refuses at start-up, naming the op, a plan
  // with an op its device cannot run.
  virtual bool supports_op(std::span<const DType> storage, size_t inputs) const = 0;
  // One op, decoded for the kernels (engine/ops decodes a model's: ops::decode_op), queued on the compute
  // stream with this device's kernels. Its operands must stay valid until it has run; the call itself is read
  // during this call (a caller keeps one decoded call per op and passes it every step). *loss (host memory,
  // may be null) receives the loss's forward value once it has.
  virtual void run_op(const kernels::OpCall& call, float* loss, std::string_view label) = 0;
  // AdamW over buckets whose optimizer state lives on the device (policy resident), with the CPU AdamW's
  // arithmetic exactly (cpu_optim/adamw.h): each bucket's gradient statistics, summed in bucket order, the
  // step decision (written to *decision, host memory), the update, and each bucket's fp32 working copy.
  // Only hyper-parameters and views cross this seam: each device brings its own kernels.
  struct OptimizerBucket {
    float* master;
    float* m;
    float* v;
    const void* grad;     // stored as grad_type (the precision, or fp32 sums over micro-batches)
    DType grad_type;
    void* working;        // the weights the ops read, written by the same fused pass as working_type
    DType working_type;
    int64_t numel;
    // Parameter groups: ranges of the bucket with their own lr multiplier and weight decay, as
    // cpu_optim::Bucket::ranges (covering the bucket in order); empty: the whole bucket with `hyper`.
    std::vector<cpu_optim::HyperRange> ranges = {};
  };
  virtual void adamw(std::vector<OptimizerBucket> buckets, const cpu_optim::AdamWHyper& hyper, int64_t step, double lr,
                     float max_norm, float loss_scale, cpu_optim::StepDecision* decision, std::string_view label) = 0;
  // The same in two halves, for a device tier beside the CPU's AdamW (the host decides the step from every
  // bucket's statistics): each bucket's gradient statistics into stats[i] (host memory, written once the
  // work has run), then, later, AdamW on the buckets under *decision, read from host memory when that work
  // runs. Both on the compute stream, with the arithmetic of adamw().
  virtual void gradient_statistics(std::vector<OptimizerBucket> buckets, cpu_optim::GradStats* stats,
                                   std::string_view label) = 0;
  virtual void adamw_decided(std::vector<OptimizerBucket> buckets, const cpu_optim::AdamWHyper& hyper, int64_t step,
                             double lr, const cpu_optim::StepDecision* decision, std::string_view label) = 0;
};

}  // namespace ferry::device
