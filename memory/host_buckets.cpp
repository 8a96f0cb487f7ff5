// HostBuckets: region carving and views.
#include "memory/host_buckets.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace ferry::memory {
namespace {

constexpr int64_t kRegionAlignment = 4096;  // page-aligned regions: DMA-friendly starts

int64_t region_bytes(int64_t numel, DType t) {
  return (numel * dtype_bytes(t) + kRegionAlignment - 1) / kRegionAlignment * kRegionAlignment;
}

// The shared zeros of frozen buckets: as large as the largest one's fp32 region (which holds its
// gradient region in any dtype too).
int64_t frozen_zero_bytes(const BucketLayout& layout) {
  int64_t numel = 0;
  for (const auto& b : layout.buckets())
    if (b.frozen) numel = std::max(numel, b.numel);
  return numel > 0 ? region_bytes(numel, DType::F32) : 0;
}

// A frozen bucket of the compact state owns its m and v too: start-up builds its weights in fp32 there. A
// trained bucket whose gradients land on its working copy owns no gradient region.
bool owned(const BucketLayout::Bucket& b, HostBuckets::Region r, bool compact, HostBuckets::GradLanding landing) {
  using Region = HostBuckets::Region;
  if (r == Region::Master) return !compact;
  if (r == Region::Grad) return !b.frozen && landing == HostBuckets::GradLanding::OwnRegion;
  return !b.frozen || r == Region::Working || (compact && (r == Region::M || r == Region::V));
}

void check_landing(DType working, DType grad, bool compact, HostBuckets::GradLanding landing) {
  if (landing == HostBuckets::GradLanding::OwnRegion) return;
  if (compact)
    throw std::logic_error(
        "host buckets: the compact state's working copy is the weight; its gradients cannot land on it");
  if (working != grad)
    throw std::logic_error(std::string("host buckets: gradients in ") + to_string(grad) +
                           " cannot land on a working copy in " + to_string(working));
}

DType region_dtype(HostBuckets::Region r, DType working, DType grad, bool compact) {
  using Region = HostBuckets::Region;
  if (r == Region::Working) return working;
  if (r == Region::Grad) return grad;
  return compact ? DType::BF16 : DType::F32;  // master (exact only), m, v
}

}  // namespace

DType HostBuckets::dtype(Region r) const { return region_dtype(r, working_, grad_, compact_); }

int64_t HostBuckets::bytes_needed(const BucketLayout& layout, DType working, DType grad, bool compact,
                                  GradLanding landing) {
  check_landing(working, grad, compact, landing);
  int64_t total = frozen_zero_bytes(layout);
  for (const auto& b : layout.buckets())
    for (int r = 0; r < 5; ++r) {
      const auto region = static_cast<Region>(r);
      if (owned(b, region, compact, landing))
        total += region_bytes(b.numel, region_dtype(region, working, grad, compact));
    }
  return total;
}

HostBuckets::HostBuckets(const BucketLayout& layout, PinnedHostPool& pool, DType working, DType grad, bool compact,
                         GradLanding landing)
    : layout_(layout), working_(working), grad_(grad), compact_(compact), landing_(landing) {
  check_landing(working, grad, compact, landing);
  const int64_t zero_bytes = frozen_zero_bytes(layout);
  std::byte* zeros = zero_bytes > 0 ? pool.carve(zero_bytes, kRegionAlignment) : nullptr;  // the pool starts zeroed
  for (const auto& b : layout.buckets()) {
    std::array<std::byte*, 5> regions{};
    for (int r = 0; r < 5; ++r) {
      const Region region = static_cast<Region>(r);
      if (region == Region::Master && compact) continue;  // none: region() refuses it
      if (region == Region::V && compact) {               // carved with m, right after it: compact_scratch()
        regions[r] = regions[static_cast<int>(Region::M)] + region_bytes(b.numel, DType::BF16);
        continue;
      }
      if (region == Region::Grad && !b.frozen && landing == GradLanding::OnWorkingCopy) {
        regions[r] = regions[static_cast<int>(Region::Working)];
        continue;
      }
      const int64_t bytes = region_bytes(b.numel, dtype(region)) * (region == Region::M && compact ? 2 : 1);
      regions[r] = owned(b, region, compact, landing) ? pool.carve(bytes, kRegionAlignment) : zeros;
    }
    base_.push_back(regions);
  }
}

void HostBuckets::check_region(Region r) const {
  if (r == Region::Master && compact_)
    throw std::logic_error("host buckets: the compact state has no fp32 master; its working copy is the weight");
}

TensorView HostBuckets::region(int bucket, Region r) const {
  check_region(r);
  return {base_.at(bucket)[static_cast<int>(r)], {layout_.buckets()[bucket].numel}, dtype(r)};
}

TensorView HostBuckets::view(int param, Region r) const {
  check_region(r);
  const auto& s = layout_.slot(param);
  const DType t = dtype(r);
  return {base_[s.bucket][static_cast<int>(r)] + s.offset * dtype_bytes(t), s.shape, t};
}

std::span<float> HostBuckets::compact_scratch(int bucket) const {
  if (!compact_) throw std::logic_error("host buckets: only the compact state has a start-up scratch");
  return {reinterpret_cast<float*>(base_.at(bucket)[static_cast<int>(Region::M)]),
          static_cast<size_t>(layout_.buckets()[bucket].numel)};
}

std::span<float> HostBuckets::fp32(int bucket, Region r) const {
  if (compact_) throw std::logic_error("host buckets: the compact state keeps no fp32 region");
  return {reinterpret_cast<float*>(base_.at(bucket)[static_cast<int>(r)]),
          static_cast<size_t>(layout_.buckets()[bucket].numel)};
}

}  // namespace ferry::memory
