// The lower bound on a step: the terms every placement pays, as affine functions of its tiers' sizes,
// and the exact minimum of their maximum over the placements the budget allows.
#include "offload/lower_bound.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace ferry::offload {
namespace {

// The point where two lines a x + b y + c = 0 cross; false when they are parallel.
bool crossing(const Affine& p, const Affine& q, double& x, double& y) {
  const double det = p.a * q.b - q.a * p.b;
  const double scale = std::max({std::abs(p.a * q.b), std::abs(q.a * p.b), 1e-300});
  if (std::abs(det) <= 1e-12 * scale) return false;
  x = (p.b * q.c - q.b * p.c) / det;
  y = (q.a * p.c - p.a * q.c) / det;
  return std::isfinite(x) && std::isfinite(y);
}

}  // namespace

double min_of_max(const std::vector<Affine>& given_terms, const std::vector<Affine>& limits) {
  // Each term once: a copy changes neither the maximum nor the vertices (its lines are those of the
  // original), and the pipelined bound's terms repeat 8-fold without accumulation (96 terms, 12 distinct: the
  // vertex search is quadratic in the lines, which are quadratic in the terms).
  std::vector<Affine> terms;
  for (const Affine& t : given_terms)
    if (std::none_of(terms.begin(), terms.end(),
                     [&](const Affine& u) { return u.a == t.a && u.b == t.b && u.c == t.c; }))
      terms.push_back(t);
  std::vector<Affine> all_limits = limits;
  all_limits.push_back({-1, 0, 0});  // x >= 0
  all_limits.push_back({0, -1, 0});  // y >= 0
  auto feasible = [&](double x, double y) {
    for (const Affine& l : all_limits)
      if (l.at(x, y) > 1e-9 * (std::abs(l.a * x) + std::abs(l.b * y) + std::abs(l.c) + 1e-300)) return false;
    return true;
  };
  auto value = [&](double x, double y) {
    double v = -std::numeric_limits<double>::infinity();
    for (const Affine& t : terms) v = std::max(v, t.at(x, y));
    return v;
  };
  // The lines a vertex lies on: each limit's boundary, and where two terms are equal.
  std::vector<Affine> lines = all_limits;
  for (size_t i = 0; i < terms.size(); ++i)
    for (size_t j = i + 1; j < terms.size(); ++j) lines.push_back({terms[i].a - terms[j].a, terms[i].b - terms[j].b, terms[i].c - terms[j].c});
  double best = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < lines.size(); ++i)
    for (size_t j = i + 1; j < lines.size(); ++j) {
      double x = 0, y = 0;
      if (crossing(lines[i], lines[j], x, y) && feasible(x, y)) best = std::min(best, value(x, y));
    }
  return best;
}

// Per op: the workspace and activations, the bytes of the buckets it reads, the gradient buffers alive
// (first write <= op <= last write), the parameters whose gradients are finished before it.
struct OpMemory {
  std::vector<double> base, reads, grads, finished;
};

OpMemory op_memory(const OffloadProblem& p) {
  OpMemory m{std::vector<double>(p.n_ops + 1, double(p.workspace_bytes)), std::vector<double>(p.n_ops + 1, 0),
             std::vector<double>(p.n_ops + 1, 0), std::vector<double>(p.n_ops + 1, 0)};
  for (int i = 0; i < p.n_ops; ++i) {
    m.base[i] += double(p.activation_live[i]);
    for (int b : p.op_buckets[i]) m.reads[i] += double(p.bucket_bytes[b]);
  }
  for (int b = 0; b < p.n_buckets; ++b) {
    if (p.first_grad_op[b] < 0) continue;
    for (int i = p.first_grad_op[b]; i <= p.last_grad_op[b]; ++i) m.grads[i] += double(p.bucket_bytes[b]);
    for (int i = p.last_grad_op[b] + 1; i <= p.n_ops; ++i) m.finished[i] += double(p.bucket_params[b]);
  }
  return m;
}

// The least room for weights (the budget less the workspace, activations and gradient buffers) at the
// ops that lie between every trained bucket's last forward use and its first use after the forward pass:
// a streamed parameter either stays on the device over all of them or crosses the link again after the
// forward pass. +infinity when no op lies between (a bucket used only in forward, or only after).
double turnaround_room(const OffloadProblem& p, const OpMemory& m) {
  std::vector<int> last_forward(p.n_buckets, -1), first_after(p.n_buckets, p.n_ops);
  for (int i = 0; i < p.n_ops; ++i)
    for (int b : p.op_buckets[i]) {
      if (i < p.forward_ops) last_forward[b] = i;
      else first_after[b] = std::min(first_after[b], i);
    }
  int from = 0, to = p.n_ops - 1;
  for (int b = 0; b < p.n_buckets; ++b) {
    if (p.first_grad_op[b] < 0) continue;
    if (last_forward[b] < 0 || first_after[b] == p.n_ops) return INFINITY;
    from = std::max(from, last_forward[b]), to = std::min(to, first_after[b]);
  }
  double room = INFINITY;
  for (int i = from; i <= to; ++i) room = std::min(room, double(p.budget_bytes) - m.base[i] - m.grads[i]);
  return room;
}

// The memory limits on (x, y) (docs/design.md, "The lower bound holds for every placement"), each at its
// tightest op.
std::vector<Affine> memory_limits(const OffloadProblem& p, const OpMemory& m, double w, double state) {
  const double P = double(p.trained_params());
  const std::vector<double>&base = m.base, &reads = m.reads, &grads = m.grads, &finished = m.finished;
  // a x + b y <= room, one room per combination: weights w (x + y) or U_i; finished device gradients or none.
  double tiers_room = INFINITY, tiers_grads_room = INFINITY, reads_room = INFINITY, reads_grads_room = INFINITY;
  for (int i = 0; i <= p.n_ops; ++i) {
    const double left = double(p.budget_bytes) - base[i] - grads[i], unfinished = w * (P - finished[i]);
    tiers_room = std::min(tiers_room, left);
    tiers_grads_room = std::min(tiers_grads_room, left + unfinished);
    reads_room = std::min(reads_room, left - reads[i]);
    reads_grads_room = std::min(reads_grads_room, left - reads[i] + unfinished);
  }
  return {{w + state, w, -tiers_room}, {2 * w + state, w, -tiers_grads_room}, {state, 0, -reads_room}, {w + state, 0, -reads_grads_room}};
}

// The least k M + T over the placements (x parameters in the device tier, y resident for the CPU to update,
// the rest streamed) that the memory limits allow, for the update in the step, delayed or pipelined. The
// derivation, and why it holds for every placement: docs/design.md, "The lower bound holds for every placement".
double lower_bound_step_s(const OffloadProblem& p, Overlap overlap) {
  const auto& t = p.op_seconds;
  const double forward = std::accumulate(t.begin(), t.begin() + p.forward_ops, 0.0);
  const double backward = std::accumulate(t.begin() + p.forward_ops, t.end(), 0.0);
  const double P = double(p.trained_params()), w = double(dtype_bytes(p.precision)), k = p.grad_accum;
  const double wh = w / (p.cost.h2d.gbps * 1e9), wd = w / (p.cost.d2h.gbps * 1e9);
  const double a_cpu = 1 / p.cpu_adam_params_per_s(), a_norm = 1 / p.cost.cpu_norm_params_per_s;
  const double a_dev = 1 / p.cost.device_adam_params_per_s;
  const double state = p.grad_accum > 1 ? 16 : 12;
  // Terms in (x, y); s = P - x - y, s + y = P - x.
  const Affine streamed_in{-wh, -wh, P * wh}, grads_out{-wd, 0, P * wd}, statistics{-a_norm, 0, P * a_norm};
  const std::vector<Affine> forward_part{{0, 0, forward}, streamed_in};
  // The streamed parameters the turnaround cannot hold cross again after the forward pass: at least
  // s - (R - (w + state) x - w y) / w = P - R / w + (state / w) x of them, R the turnaround's room.
  const OpMemory memory = op_memory(p);
  const double room = turnaround_room(p, memory);
  std::vector<Affine> backward_part{{0, 0, backward}, grads_out, statistics};
  if (std::isfinite(room)) backward_part.push_back({wh * state / w, 0, wh * (P - room / w)});
  const bool delayed = overlap == Overlap::Delayed;
  const std::vector<Affine> tail = delayed ? std::vector<Affine>{{a_dev, 0, 0}}
                                           : std::vector<Affine>{{a_dev, 0, 0}, {-a_cpu, 0, P * a_cpu}, {0, wh, 0}};
  std::vector<Affine> terms;
  if (overlap == Overlap::Pipelined) {
    const std::vector<Affine> first_forward{{a_dev, 0, forward}, {-wh, 0, P * wh}, {-a_cpu, 0, P * a_cpu}};
    for (const Affine& f1 : first_forward)
      for (const Affine& b1 : backward_part)
        for (const Affine& f : forward_part)
          for (const Affine& b : backward_part)
            terms.push_back({f1.a + b1.a + (k - 1) * (f.a + b.a), f1.b + b1.b + (k - 1) * (f.b + b.b), f1.c + b1.c + (k - 1) * (f.c + b.c)});
  } else {
    for (const Affine& f : forward_part)
      for (const Affine& b : backward_part)
        for (const Affine& e : tail) terms.push_back({k * (f.a + b.a) + e.a, k * (f.b + b.b) + e.b, k * (f.c + b.c) + e.c});
  }
  std::vector<Affine> limits = memory_limits(p, memory, w, state);
  limits.push_back({1, 1, -P});
  if (p.compact_state) limits.push_back({1, 0, 0});  // x <= 0: the compact state is updated on the CPU only
  if (delayed) terms.push_back({a_dev - (a_cpu + a_norm), 0, P * (a_cpu + a_norm)});
  return min_of_max(terms, limits);
}

}  // namespace ferry::offload
