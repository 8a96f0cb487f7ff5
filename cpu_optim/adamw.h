// CpuAdamW: AdamW on host memory at the speed of memory, with PyTorch's semantics (decoupled weight
// decay, bias correction). One fused pass per element over a bucket: unscale the gradient (fp32, bf16 or
// fp16), update m, v and the fp32 master weight, and optionally write the new weight as bf16/fp16/fp32 into
// an upload buffer. A second, read-only pass gives the gradients' sum of squares and whether any is inf/nan.
// AVX-512 / AVX2 / scalar kernels chosen at run time (isa.h), parallel with oneTBB over cache-sized tiles.
// The sequence of a whole step (statistics, decision, update) is OptimizerStep (optimizer_step.h).
#pragma once

#include <tbb/task_arena.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "cpu_optim/isa.h"
#include "kernels/adamw_math.h"
#include "kernels/step_decision.h"
#include "memory/dtype.h"

namespace ferry::cpu_optim {

// The step decision is a rule the device AdamW shares (kernels/step_decision.h); cpu_optim's API speaks it.
using kernels::clip_scale;
using kernels::decide_step;
using kernels::GradStats;
using kernels::StepDecision;
using kernels::StepReport;

enum class Rounding { NearestEven, Stochastic };  // of the half-precision copy-out

// Kept in double, as PyTorch keeps its Python-float hyper-parameters: the per-step coefficients are
// computed in double and rounded to fp32 once.
struct AdamWHyper {
  double lr = 3e-4;  // peak; each step passes its own lr
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

struct AdamWOptions {
  AdamWHyper hyper;
  std::string isa = "auto";   // auto | scalar | avx2 | avx512 (FERRY_CPU_ISA overrides)
  int threads = 0;            // 0: all cores
  Rounding rounding = Rounding::NearestEven;
  uint64_t seed = 0;          // of stochastic rounding
};

// A run of a bucket's elements with a learning-rate multiplier and a weight decay of its own (parameter
// groups): its elements update with lr * lr_scale and decay by 1 - lr * lr_scale * weight_decay, as a
// torch.optim.AdamW parameter group with that lr and weight_decay would.
struct HyperRange {
  size_t begin = 0, end = 0;  // elements [begin, end) of the bucket
  double lr_scale = 1;
  double weight_decay = 0;    // in place of AdamWHyper::weight_decay
};

// One bucket: fp32 master weights and moments, its gradients, and an optional upload copy.
struct Bucket {
  std::span<float> param, m, v;
  const void* grad = nullptr;
  DType grad_type = DType::F32;
  void* upload = nullptr;           // null: no copy-out
  DType upload_type = DType::BF16;  // BF16, F16, or F32 (bitwise the new master, for an fp32 working copy)
  // Empty: every element with the step's lr and AdamWHyper::weight_decay. Else ranges that cover the
  // bucket in order, without gaps or overlaps, each updated with its own coefficients; an element's result
  // does not depend on how the bucket is split, so a range with lr_scale 1 and the hyper's weight decay
  // is bitwise the unsplit update.
  std::span<const HyperRange> ranges = {};
};

// One bucket of the compact optimizer state (optim.state: compact): the weights themselves in bf16 (the copy
// that travels to the device; there is no fp32 master) and m and v in bf16: 6 bytes a parameter where the
// exact state takes 14. Each element takes the exact update on its widened values; m and v are rounded to
// nearest even, the weight stochastically, so that an update below half a bf16 ulp still moves it in
// expectation. The random bits hash the element's index in the model (first_index: the bucket's first), so
// no two elements of a step share them and the result depends on no split, thread or ISA.
struct CompactBucket {
  std::span<uint16_t> param, m, v;  // bf16 bits
  const void* grad = nullptr;
  DType grad_type = DType::BF16;
  uint32_t first_index = 0;
  std::span<const HyperRange> ranges = {};  // as Bucket::ranges
};

// One step's coefficients for the element update (kernels/adamw_math.h), computed in double and rounded to
// fp32 once, as PyTorch does: what CpuAdamW::step hands its kernels for a range, and the device AdamW its
// kernel. `seed`: of stochastic rounding.
kernels::AdamWCoefficients adamw_coefficients(const AdamWHyper& hyper, int64_t step, double lr, float grad_scale,
                                              uint64_t seed);

class CpuAdamW {
 public:
  explicit CpuAdamW(const AdamWOptions& options);
  ~CpuAdamW();

  Isa isa() const { return isa_; }
  int threads() const { return threads_; }
  const AdamWHyper& hyper() const { return options_.hyper; }

  // Fused read-only pass over n gradients (fp32, bf16 or fp16).
  GradStats grad_stats(const void* grad, DType type, size_t n) const;

  // Throws std::invalid_argument when step() would refuse the bucket, so that a caller can check every
  // bucket before it changes any.
  void check(const Bucket& bucket) const;
  void check(const CompactBucket& bucket) const;

  // One AdamW step on one bucket: step counts from 1, lr is this step's learning rate, and every gradient
  // is multiplied by grad_scale first (clip coefficient / loss scale).
  void step(const Bucket& bucket, int64_t step, double lr, float grad_scale) const;
  // The same on the compact state.
  void step(const CompactBucket& bucket, int64_t step, double lr, float grad_scale) const;

  // The whole optimizer step over every bucket of a model: OptimizerStep(*this, buckets.size(), max_norm,
  // loss_scale).run(buckets, step, lr).
  StepReport apply(std::span<const Bucket> buckets, int64_t step, double lr, float max_norm,
                   float loss_scale = 1.0f) const;

 private:
  // Calls kernel(coefficients, begin, end) on tiles of each range of an n-element bucket.
  template <class Kernel>
  void for_ranges(size_t n, std::span<const HyperRange> ranges, int64_t step, double lr, float grad_scale,
                  Kernel&& kernel) const;

  AdamWOptions options_;
  Isa isa_;
  int threads_;
  std::unique_ptr<tbb::task_arena> arena_;
};

}  // namespace ferry::cpu_optim
