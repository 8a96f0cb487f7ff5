// The CPU optimizer's part of a schedule, shared by every policy that runs AdamW on the CPU (add_cpu_optimizer):
// each bucket's gradients leave for the host right after the last op writing them; their device buffer is
// released once the copy has had time to finish behind the ones queued before it (by the cost model), and
// AdamW runs on the bucket as soon as they land. And the updates that run on past the step: delayed and
// pipelined.
#include <algorithm>
#include <stdexcept>

#include "offload/policy_parts.h"

namespace ferry::offload {

std::vector<int64_t> add_cpu_optimizer(const OffloadProblem& p, Schedule& s) {
  const auto t = detail::timeline(p);
  std::vector<int64_t> grads_live(p.n_ops, 0);
  std::vector<int> offloaded;  // in the order their copies queue on the d2h stream: by the point they leave
  for (int b = 0; b < p.n_buckets; ++b)
    if (p.first_grad_op[b] >= 0 && !s.device_optimizer[b]) offloaded.push_back(b);
  std::stable_sort(offloaded.begin(), offloaded.end(),
                   [&](int a, int b) { return p.last_grad_op[a] < p.last_grad_op[b]; });
  double d2h_free = 0;  // on the ideal timeline: a copy waits behind the ones queued before it
  for (int b : offloaded) {
    const int out = p.last_grad_op[b] + 1;
    s.before[out].push_back({Action::Kind::OffloadGrads, b});
    s.before[out].push_back({Action::Kind::CpuAdam, b});
    d2h_free = std::max(d2h_free, t[out]) + p.cost.d2h.seconds(p.bucket_bytes[b]);
    int release = out;
    while (release < p.n_ops && t[release] < d2h_free) ++release;
    release = std::min(p.n_ops, release + 1);
    s.before[release].push_back({Action::Kind::ReleaseGrads, b});
    for (int i = p.first_grad_op[b]; i < release && i < p.n_ops; ++i) grads_live[i] += p.bucket_bytes[b];
    if (s.resident[b]) s.before[p.n_ops].push_back({Action::Kind::Upload, b});
  }
  return grads_live;
}

Schedule with_delayed_update(const OffloadProblem& p, Schedule s) {
  if (s.all_device_optimizer())
    throw std::invalid_argument("offload.overlap: delayed needs AdamW on the CPU for some bucket; " + s.label() +
                                " runs it on the device for every one");
  std::vector<int> last_use(p.n_buckets, -1);
  for (int i = 0; i < p.n_ops; ++i)
    for (int b : p.op_buckets[i]) last_use[b] = i;
  for (auto& actions : s.before) std::erase_if(actions, [](const Action& a) { return a.kind == Action::Kind::Upload; });
  for (int b = 0; b < p.n_buckets; ++b)
    if (s.resident[b] && !s.device_optimizer[b] && p.first_grad_op[b] >= 0)
      s.before[last_use[b] + 1].push_back({Action::Kind::Upload, b});
  s.delayed_update = true;
  return s;
}

Schedule with_pipelined_update(Schedule s) {
  if (s.all_device_optimizer())
    throw std::invalid_argument("offload.overlap: pipelined needs AdamW on the CPU for some bucket; " + s.label() +
                                " runs it on the device for every one");
  s.pipelined_update = true;
  return s;
}

}  // namespace ferry::offload
