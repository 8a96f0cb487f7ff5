// HostBuckets: the host side of every bucket, carved from a pinned pool. Per bucket, contiguous regions:
// the fp32 master weights, Adam's m and v, the working copy that travels to the device, and the landing
// region of its gradients; views give each parameter's slice of each region. A frozen bucket (never
// updated, no gradients) owns only its master and working copy: its m, v and gradient regions are views of
// one shared block of zeros, which nothing writes (checkpoints read zero moments from it).
// Where the working copy is not read between the landing of a bucket's gradients and its update (the executor
// decides: Executor::gradient_landing), the gradients land on the working copy itself, one region for both:
// AdamW reads each gradient and writes the new weight in its place, 2 bytes a parameter less (4 in fp32).
// The compact state (optim.state: compact) has no master: the working copy (bf16) is the weight, and m and v
// are bf16 too (cpu_optim::CompactBucket).
// A bucket whose whole state the device keeps (the device tier: AdamW on the device, its master, m, v and
// working copy in the device's arena) may be left out: it then has no region here at all, and start-up and
// checkpoints move its state through a small staging area of the executor (Executor::write_device_tier).
#pragma once

#include <array>
#include <span>
#include <vector>

#include "memory/bucket_layout.h"
#include "memory/pinned_pool.h"
#include "memory/tensor_view.h"

namespace ferry::memory {

class HostBuckets {
 public:
  enum class Region { Master, M, V, Working, Grad };
  // Where a trained bucket's gradients land: a region of their own, or on its working copy (the exact state
  // only, gradients in the working copy's dtype).
  enum class GradLanding { OwnRegion, OnWorkingCopy };

  // The pool bytes HostBuckets will carve for this layout (to size the pool before creating it).
  // device_only: per bucket, whether the device alone keeps its state (empty: none does).
  static int64_t bytes_needed(const BucketLayout& layout, DType working, DType grad, bool compact = false,
                              GradLanding landing = GradLanding::OwnRegion, const std::vector<bool>& device_only = {});

  HostBuckets(const BucketLayout& layout, PinnedHostPool& pool, DType working, DType grad, bool compact = false,
              GradLanding landing = GradLanding::OwnRegion, std::vector<bool> device_only = {});

  const BucketLayout& layout() const { return layout_; }
  bool compact() const { return compact_; }
  GradLanding grad_landing() const { return landing_; }
  // Whether the device alone keeps this bucket's state (no region here: region() and view() refuse it).
  bool on_device(int bucket) const { return !on_device_.empty() && on_device_.at(bucket); }
  // The whole region of one bucket, and one parameter's slice of it. The compact state's master is an error.
  TensorView region(int bucket, Region r) const;
  TensorView view(int param, Region r) const;
  std::span<float> master(int bucket) const { return fp32(bucket, Region::Master); }  // (exact state only)
  std::span<float> m(int bucket) const { return fp32(bucket, Region::M); }
  std::span<float> v(int bucket) const { return fp32(bucket, Region::V); }
  // The compact state's m and v regions of a bucket, adjacent, seen as one fp32 region of its elements: where
  // start-up builds the initial weights in fp32 before rounding them into the working copy, with no second
  // copy of the model. Zero it afterwards (m and v start at zero).
  std::span<float> compact_scratch(int bucket) const;

 private:
  std::span<float> fp32(int bucket, Region r) const;
  void check_region(int bucket, Region r) const;
  DType dtype(Region r) const;

  const BucketLayout& layout_;
  DType working_, grad_;
  bool compact_;
  GradLanding landing_;
  std::vector<bool> on_device_;
  std::vector<std::array<std::byte*, 5>> base_;  // per bucket, per region
};

}  // namespace ferry::memory
