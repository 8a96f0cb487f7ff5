// CpuAdamW: per-step coefficients, the tile loop on a oneTBB arena, ISA dispatch, and the checks of a bucket.
#include "cpu_optim/adamw.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <thread>
#include <vector>

#include "foundation/precision.h"
#include "cpu_optim/kernels.h"

namespace ferry::cpu_optim {
namespace {

// 16Ki elements: 64 KiB of each fp32 stream, so a tile's four streams stay in L2 while it is updated.
constexpr size_t kTile = 1 << 14;

template <class Body>
void for_tiles(tbb::task_arena& arena, size_t n, Body&& body) {
  const size_t tiles = (n + kTile - 1) / kTile;
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<size_t>(0, tiles, 1), [&](const tbb::blocked_range<size_t>& r) {
      for (size_t t = r.begin(); t != r.end(); ++t) body(t, t * kTile, std::min(n, (t + 1) * kTile));
    }, tbb::simple_partitioner());
  });
}

// The kernels pass over an int32 buffer without reading or writing it (their switches have no case for
// it), so a wrong dtype is refused here rather than read as zero gradients or left unwritten.
void check_float_type(DType type, const char* what) {
  if (type != DType::F32 && type != DType::BF16 && type != DType::F16)
    throw std::invalid_argument(std::string("adamw: ") + what + " are " + to_string(type) +
                                "; AdamW takes fp32, bf16 or fp16");
}

}  // namespace

CpuAdamW::CpuAdamW(const AdamWOptions& options)
    : options_(options),
      isa_(resolve_isa(options.isa)),
      threads_(options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency())),
      arena_(std::make_unique<tbb::task_arena>(threads_)) {
  const auto& h = options.hyper;
  if (!(h.beta1 >= 0 && h.beta1 < 1 && h.beta2 >= 0 && h.beta2 < 1 && h.eps >= 0 && h.weight_decay >= 0))
    throw std::invalid_argument("adamw: betas must lie in [0, 1), eps and weight_decay must be >= 0");
}

CpuAdamW::~CpuAdamW() = default;

GradStats CpuAdamW::grad_stats(const void* grad, DType type, size_t n) const {
  check_float_type(type, "gradients");
  if (n > 0 && !grad) throw std::invalid_argument("adamw: statistics of null gradients");
  std::vector<double> partial((n + kTile - 1) / kTile, 0.0);
  for_tiles(*arena_, n, [&](size_t t, size_t i0, size_t i1) {
    switch (isa_) {
      case Isa::Avx512: partial[t] = detail::sum_squares_avx512(grad, type, i0, i1); break;
      case Isa::Avx2: partial[t] = detail::sum_squares_avx2(grad, type, i0, i1); break;
      case Isa::Scalar: partial[t] = detail::sum_squares_scalar(grad, type, i0, i1); break;
    }
  });
  GradStats s;
  for (double p : partial) s.sum_squares += p;  // fixed order: bitwise reproducible
  s.finite = std::isfinite(s.sum_squares);      // an inf or nan anywhere makes the sum inf or nan
  return s;
}

namespace {

// Ranges cover [0, n) in order; their settings are what AdamW allows.
void check_ranges(std::span<const HyperRange> ranges, size_t n) {
  if (ranges.empty()) return;
  size_t next = 0;
  for (const HyperRange& r : ranges) {
    if (r.begin != next || r.end < r.begin || r.end > n)
      throw std::invalid_argument("adamw: the hyper-parameter ranges of a bucket of " + std::to_string(n) + " elements must cover it in order; " +
                                  "a range [" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ") follows element " + std::to_string(next));
    if (!(r.lr_scale >= 0 && r.weight_decay >= 0))
      throw std::invalid_argument("adamw: a range's lr_scale and weight_decay must be >= 0");
    next = r.end;
  }
  if (next != n) throw std::invalid_argument("adamw: the hyper-parameter ranges end at element " + std::to_string(next) + " of " + std::to_string(n));
}

}  // namespace

void CpuAdamW::check(const Bucket& b) const {
  const size_t n = b.param.size();
  if (b.m.size() != n || b.v.size() != n)
    throw std::invalid_argument("adamw: param, m and v of a bucket must have the same length");
  check_ranges(b.ranges, n);
  if (n > 0 && !b.grad) throw std::invalid_argument("adamw: bucket without gradients");
  check_float_type(b.grad_type, "gradients");
  if (!b.upload) return;
  check_float_type(b.upload_type, "the upload copy's elements");
  if (b.upload_type == DType::F16 && options_.rounding == Rounding::Stochastic)
    throw std::invalid_argument("adamw: stochastic rounding is implemented for bf16 uploads, not fp16");
}

void CpuAdamW::check(const CompactBucket& b) const {
  const size_t n = b.param.size();
  if (b.m.size() != n || b.v.size() != n)
    throw std::invalid_argument("adamw: the compact state's weights, m and v of a bucket must have the same length");
  check_ranges(b.ranges, n);
  if (n > 0 && !b.grad) throw std::invalid_argument("adamw: bucket without gradients");
  check_float_type(b.grad_type, "gradients");
}

kernels::AdamWCoefficients adamw_coefficients(const AdamWHyper& h, int64_t step, double lr, float grad_scale,
                                              uint64_t seed) {
  const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(step));
  const uint32_t seed_key = random_bits(static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(seed));
  return {static_cast<float>(h.beta1),
          static_cast<float>(1.0 - h.beta1),
          static_cast<float>(h.beta2),
          static_cast<float>(1.0 - h.beta2),
          static_cast<float>(1.0 - lr * h.weight_decay),
          static_cast<float>(lr / bc1),
          static_cast<float>(1.0 / std::sqrt(bc2)),
          static_cast<float>(h.eps),
          grad_scale,
          random_bits(seed_key, static_cast<uint32_t>(step))};
}

// One pass per range, with its lr and weight decay in the two coefficients they enter; element indices
// stay the bucket's (stochastic rounding hashes them).
template <class Kernel>
void CpuAdamW::for_ranges(size_t n, std::span<const HyperRange> ranges, int64_t step, double lr, float grad_scale,
                          Kernel&& kernel) const {
  if (step < 1) throw std::invalid_argument("adamw: step counts from 1");
  const HyperRange whole{0, n, 1.0, options_.hyper.weight_decay};
  for (const HyperRange& r : ranges.empty() ? std::span<const HyperRange>(&whole, 1) : ranges) {
    AdamWHyper range_hyper = options_.hyper;
    range_hyper.weight_decay = r.weight_decay;
    const kernels::AdamWCoefficients c =
        adamw_coefficients(range_hyper, step, lr * r.lr_scale, grad_scale, options_.seed);
    for_tiles(*arena_, r.end - r.begin, [&](size_t, size_t i0, size_t i1) { kernel(c, r.begin + i0, r.begin + i1); });
  }
}

void CpuAdamW::step(const Bucket& b, int64_t step, double lr, float grad_scale) const {
  check(b);
  for_ranges(b.param.size(), b.ranges, step, lr, grad_scale,
             [&](const kernels::AdamWCoefficients& c, size_t i0, size_t i1) {
               const detail::KernelArgs a{b.param.data(), b.m.data(),    b.v.data(),        b.grad, b.grad_type,
                                          b.upload,       b.upload_type, options_.rounding, c};
               switch (isa_) {
                 case Isa::Avx512: detail::adamw_avx512(a, i0, i1); break;
                 case Isa::Avx2: detail::adamw_avx2(a, i0, i1); break;
                 case Isa::Scalar: detail::adamw_scalar(a, i0, i1); break;
               }
             });
}

void CpuAdamW::step(const CompactBucket& b, int64_t step, double lr, float grad_scale) const {
  check(b);
  for_ranges(
      b.param.size(), b.ranges, step, lr, grad_scale, [&](const kernels::AdamWCoefficients& c, size_t i0, size_t i1) {
        const detail::CompactArgs a{b.param.data(), b.m.data(), b.v.data(), b.grad, b.grad_type, b.first_index, c};
        switch (isa_) {
          case Isa::Avx512: detail::compact_avx512(a, i0, i1); break;
          case Isa::Avx2: detail::compact_avx2(a, i0, i1); break;
          case Isa::Scalar: detail::compact_scalar(a, i0, i1); break;
        }
      });
}

}  // namespace ferry::cpu_optim
