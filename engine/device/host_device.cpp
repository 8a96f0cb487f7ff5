// HostDevice: streams as WorkQueues; a throttled copy moves the bytes in chunks and sleeps until the
// link would have delivered them, unless a stop is requested that the copy would keep waiting.
#include "engine/device/host_device.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "cpu_optim/optimizer_step.h"
#include "engine/device/stop.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/workspace.h"
#include "memory/convert.h"

namespace ferry::device {
namespace {

struct HostDeviceEvent final : Event {
  std::shared_ptr<HostEvent> done;
  std::shared_ptr<std::chrono::steady_clock::time_point> reached;  // timed events: when the stream got here
};

const std::shared_ptr<HostEvent>& host_event(const EventPtr& e) {
  const auto* h = dynamic_cast<const HostDeviceEvent*>(e.get());
  if (!h) throw std::logic_error("an event from another device was given to the host device");
  return h->done;
}

}  // namespace

const char* to_string(Stream s) {
  switch (s) {
    case Stream::Compute: return "compute";
    case Stream::H2D: return "h2d";
    case Stream::D2H: return "d2h";
  }
  return "?";
}

HostDevice::HostDevice(const Options& o) : options_(o), arena_(memory::Arena::Backing::Host, o.arena_bytes) {
  for (Stream s : {Stream::Compute, Stream::H2D, Stream::D2H})
    queues_[static_cast<int>(s)] = std::make_unique<WorkQueue>(to_string(s), o.trace);
  host_waits_ = std::make_unique<WorkQueue>("host waits", nullptr);  // no stream of the trace's
  // OpenMP's thread count is per thread: the compute stream's thread sets its own, once.
  if (o.compute_threads > 0) {
    const int threads = o.compute_threads;
    queue(Stream::Compute).run("set threads", [threads] { kernels::cpu::set_matmul_threads(threads); });
  }
}

HostDevice::~HostDevice() {
  // Finish what is queued (its memory is still ours) before the queues and the arena go.
  for (auto& q : queues_) {
    try {
      q->drain();
    } catch (const std::exception&) {
    }
  }
}

std::unique_ptr<memory::PinnedHostPool> HostDevice::make_host_pool(int64_t bytes) const {
  return std::make_unique<memory::PinnedHostPool>(bytes, memory::PinnedHostPool::Options{.cuda = false, .lock = false});
}

std::string HostDevice::name() const {
  auto rate = [](double gbps) { return gbps > 0 ? fmt::format("{:g} GB/s", gbps) : std::string("memcpy speed"); };
  if (options_.d2h_link_gbps >= 0 && options_.d2h_link_gbps != options_.link_gbps)
    return fmt::format("host device (link {} to the device, {} back)", rate(options_.link_gbps), rate(options_.d2h_link_gbps));
  return options_.link_gbps > 0 ? fmt::format("host device (link {:g} GB/s each way)", options_.link_gbps)
                                : std::string("host device (copies at memcpy speed)");
}

void HostDevice::run(Stream s, std::string_view label, std::function<void()> work) {
  queue(s).run(std::string(label), std::move(work));
}

void HostDevice::copy(Stream s, void* dst, const void* src, int64_t bytes, std::string_view label) {
  if (s == Stream::Compute) throw std::logic_error("copies go on the h2d or d2h stream");
  const double gbps = s == Stream::D2H && options_.d2h_link_gbps >= 0 ? options_.d2h_link_gbps : options_.link_gbps;
  queue(s).run(std::string(label), [dst, src, bytes, gbps] {
    if (gbps <= 0) {
      std::memcpy(dst, src, static_cast<size_t>(bytes));
      return;
    }
    // When the link would have delivered `n` bytes; capped at a century, which no duration type overflows.
    const auto start = std::chrono::steady_clock::now();
    auto delivered = [&](int64_t n) {
      const double s = std::min(double(n) / (gbps * 1e9), 3.2e9);
      return start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
    };
    const std::string what = fmt::format("a copy of {} bytes over the {:g} GB/s link", bytes, gbps);
    // Each chunk is read and written when the link would have delivered it, not before: a copy holds its
    // source until its last byte has gone and fills its destination progressively, as a DMA engine does,
    // so that work that touches either too early (a missing event) sees the difference.
    constexpr int64_t kChunk = int64_t(256) << 10;
    for (int64_t done = 0; done < bytes;) {
      const int64_t n = std::min(kChunk, bytes - done);
      sleep_until_unless_stopped(delivered(done + n), delivered(bytes), what);  // a stop must not wait for a slow link
      std::memcpy(static_cast<std::byte*>(dst) + done, static_cast<const std::byte*>(src) + done, static_cast<size_t>(n));
      done += n;
    }
  });
}

EventPtr HostDevice::record(Stream s) {
  auto e = std::make_shared<HostDeviceEvent>();
  e->done = queue(s).record();
  return e;
}

EventPtr HostDevice::record_timed(Stream s) {
  auto e = std::make_shared<HostDeviceEvent>();
  e->reached = std::make_shared<std::chrono::steady_clock::time_point>();
  queue(s).run("timing", [at = e->reached] { *at = std::chrono::steady_clock::now(); });
  e->done = queue(s).record();
  return e;
}

double HostDevice::elapsed_seconds(const EventPtr& from, const EventPtr& to) {
  synchronize(from), synchronize(to);
  const auto* a = dynamic_cast<const HostDeviceEvent*>(from.get());
  const auto* b = dynamic_cast<const HostDeviceEvent*>(to.get());
  if (!a || !b || !a->reached || !b->reached) throw std::logic_error("elapsed_seconds needs two timed events of the host device");
  return std::chrono::duration<double>(*b->reached - *a->reached).count();
}

void HostDevice::wait(Stream s, const EventPtr& e, std::string_view label) {
  queue(s).wait(host_event(e), std::string(label));
}

EventPtr HostDevice::from_host(std::shared_ptr<HostEvent> event) {
  // Done once this host event and every one asked for before it are, as on the CUDA device (its wait kernels
  // run one after another on one stream, their flags set by one watcher in order): a wait that depended on work
  // behind a later one would deadlock a GPU, and now does here too.
  auto e = std::make_shared<HostDeviceEvent>();
  host_waits_->wait(std::move(event), "host event");
  e->done = host_waits_->record();
  return e;
}

void HostDevice::synchronize(const EventPtr& e) {
  const std::string error = host_event(e)->wait();
  if (!error.empty()) throw std::runtime_error(error);
}

void HostDevice::synchronize() {
  std::string error;  // drain every queue, then report the first failure
  for (auto& q : queues_) {
    try {
      q->drain();
    } catch (const std::exception& e) {
      if (error.empty()) error = e.what();
    }
  }
  if (!error.empty()) throw std::runtime_error(error);
}

double HostDevice::compute_stall_seconds() const { return queues_[0]->blocked_seconds(); }

void HostDevice::bind_workspace(std::byte* data, int64_t bytes) {
  // The binding is per thread (the ops' workspaces are): it must happen on the thread that runs the ops,
  // in stream order, so a task does it. The other streams run no ops.
  queue(Stream::Compute).run("bind workspace", [data, bytes] {
    kernels::cpu::bind_workspace(kernels::cpu::Scratch::Library, data, bytes);
  });
}

void HostDevice::zero(Stream s, void* dst, int64_t bytes, std::string_view label) {
  queue(s).run(std::string(label), [dst, bytes] { std::memset(dst, 0, static_cast<size_t>(bytes)); });
}

void HostDevice::accumulate(Stream s, float* dst, const void* src, DType src_type, int64_t n, bool overwrite,
                            std::string_view label) {
  queue(s).run(std::string(label),
               [dst, src, src_type, n, overwrite] { memory::accumulate_widened(dst, src, src_type, n, overwrite); });
}

bool HostDevice::supports_op(std::span<const DType> storage, size_t inputs) const {
  // Every floating-point storage (2-byte operands are widened to fp32 around the op: kernels::cpu::run_on_cpu);
  // int32 is read (token ids, targets, the attention mask) but never written.
  for (size_t k = inputs; k < storage.size(); ++k)
    if (storage[k] == DType::I32) return false;
  return true;
}

void HostDevice::run_op(const kernels::OpCall& call, float* loss, std::string_view label) {
  queue(Stream::Compute).run(std::string(label), [call, loss] {
    const float l = kernels::cpu::run_on_cpu(call);
    if (loss) *loss = l;
  });
}

const cpu_optim::CpuAdamW& HostDevice::adamw_kernels(const cpu_optim::AdamWHyper& hyper) {
  const auto same = [&](const cpu_optim::AdamWHyper& h) {
    return h.beta1 == hyper.beta1 && h.beta2 == hyper.beta2 && h.eps == hyper.eps && h.weight_decay == hyper.weight_decay;
  };
  auto kernels = std::find_if(adamw_kernels_.begin(), adamw_kernels_.end(), [&](const auto& k) { return same(k->hyper()); });
  if (kernels == adamw_kernels_.end())
    kernels = adamw_kernels_.insert(adamw_kernels_.end(),
                                    std::make_unique<cpu_optim::CpuAdamW>(cpu_optim::AdamWOptions{hyper, "auto", options_.compute_threads}));
  return **kernels;
}

namespace {

std::vector<cpu_optim::Bucket> bucket_views(const std::vector<Device::OptimizerBucket>& buckets) {
  std::vector<cpu_optim::Bucket> views;
  for (const auto& b : buckets) {
    const size_t n = static_cast<size_t>(b.numel);
    views.push_back({{b.master, n}, {b.m, n}, {b.v, n}, b.grad, b.grad_type, b.working, b.working_type, b.ranges});
  }
  return views;
}

}  // namespace

// The CPU path's arithmetic, on the host device's memory: the same OptimizerStep, so both give bitwise the
// same weights (every ISA path is bitwise the scalar one). Its kernels are made once per hyper-parameters,
// on the compute stream's cores.
void HostDevice::adamw(std::vector<OptimizerBucket> buckets, const cpu_optim::AdamWHyper& hyper, int64_t step,
                       double lr, float max_norm, float loss_scale, cpu_optim::StepDecision* decision,
                       std::string_view label) {
  // The views (their parameter-group ranges among them) point into the buckets the task keeps.
  queue(Stream::Compute)
      .run(std::string(label),
           [buckets = std::move(buckets), &rule = adamw_kernels(hyper), step, lr, max_norm, loss_scale, decision] {
             const std::vector<cpu_optim::Bucket> views = bucket_views(buckets);
             cpu_optim::OptimizerStep optimizer_step(rule, views.size(), max_norm, loss_scale);
             optimizer_step.run(views, step, lr);
             *decision = optimizer_step.decision();
           });
}

void HostDevice::gradient_statistics(std::vector<OptimizerBucket> buckets, cpu_optim::GradStats* stats,
                                     std::string_view label) {
  // Statistics need no hyper-parameters; any kernels of this CPU compute them alike.
  queue(Stream::Compute)
      .run(std::string(label), [buckets = std::move(buckets), &rule = adamw_kernels(cpu_optim::AdamWHyper{}), stats] {
        for (size_t i = 0; i < buckets.size(); ++i)
          stats[i] = rule.grad_stats(buckets[i].grad, buckets[i].grad_type, static_cast<size_t>(buckets[i].numel));
      });
}

void HostDevice::adamw_decided(std::vector<OptimizerBucket> buckets, const cpu_optim::AdamWHyper& hyper, int64_t step,
                               double lr, const cpu_optim::StepDecision* decision, std::string_view label) {
  queue(Stream::Compute)
      .run(std::string(label), [buckets = std::move(buckets), &rule = adamw_kernels(hyper), step, lr, decision] {
        const std::vector<cpu_optim::Bucket> views = bucket_views(buckets);
        const cpu_optim::OptimizerStep optimizer_step(rule, *decision);
        for (size_t i = 0; i < views.size(); ++i) optimizer_step.update(i, views[i], step, lr);
      });
}

}  // namespace ferry::device
