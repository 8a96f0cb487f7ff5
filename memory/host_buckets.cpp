// HostBuckets: region carving and views.
#include "memory/host_buckets.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

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

// Per bucket, whether the host keeps it: a device_only list is empty or has one entry per bucket, and holds only
// trained buckets (a frozen bucket has no optimizer state on the device; its working copy travels from here).
void check_device_only(const BucketLayout& layout, const std::vector<bool>& device_only) {
  if (device_only.empty()) return;
  if (device_only.size() != layout.buckets().size())
    throw std::logic_error("host buckets: an on-device flag for " + std::to_string(device_only.size()) +
                           " buckets; the layout has " + std::to_string(layout.buckets().size()));
  for (size_t b = 0; b < device_only.size(); ++b)
    if (device_only[b] && layout.buckets()[b].frozen)
      throw std::logic_error("host buckets: frozen bucket " + std::to_string(b) +
                             " has no state on the device (it is never updated); the host keeps its weights");
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
                                  GradLanding landing, const std::vector<bool>& device_only) {
  check_landing(working, grad, compact, landing);
  check_device_only(layout, device_only);
  int64_t total = frozen_zero_bytes(layout);
  for (size_t i = 0; i < layout.buckets().size(); ++i) {
    const auto& b = layout.buckets()[i];
    if (!device_only.empty() && device_only[i]) continue;
    for (int r = 0; r < 5; ++r) {
      const auto region = static_cast<Region>(r);
      if (owned(b, region, compact, landing))
        total += region_bytes(b.numel, region_dtype(region, working, grad, compact));
    }
  }
  return total;
}

HostBuckets::HostBuckets(const BucketLayout& layout, PinnedHostPool& pool, DType working, DType grad, bool compact,
                         GradLanding landing, std::vector<bool> device_only)
    : layout_(layout), working_(working), grad_(grad), compact_(compact), landing_(landing),
      on_device_(std::move(device_only)) {
  check_landing(working, grad, compact, landing);
  check_device_only(layout, on_device_);
  const int64_t zero_bytes = frozen_zero_bytes(layout);
  std::byte* zeros = zero_bytes > 0 ? pool.carve(zero_bytes, kRegionAlignment) : nullptr;  // the pool starts zeroed
  for (const auto& b : layout.buckets()) {
    std::array<std::byte*, 5> regions{};  // none for a bucket on the device
    for (int r = 0; r < 5 && !on_device(static_cast<int>(base_.size())); ++r) {
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

void HostBuckets::check_region(int bucket, Region r) const {
  if (r == Region::Master && compact_)
    throw std::logic_error("host buckets: the compact state has no fp32 master; its working copy is the weight");
  if (on_device(bucket))
    throw std::logic_error("host buckets: bucket " + std::to_string(bucket) +
                           "'s state is on the device only (the device tier); read or write it through the executor");
}

TensorView HostBuckets::region(int bucket, Region r) const {
  check_region(bucket, r);
  return {base_.at(bucket)[static_cast<int>(r)], {layout_.buckets()[bucket].numel}, dtype(r)};
}

TensorView HostBuckets::view(int param, Region r) const {
  const auto& s = layout_.slot(param);
  check_region(s.bucket, r);
  const DType t = dtype(r);
  return {base_[s.bucket][static_cast<int>(r)] + s.offset * dtype_bytes(t), s.shape, t};
}

std::span<float> HostBuckets::compact_scratch(int bucket) const {
  check_region(bucket, Region::M);
  if (!compact_) throw std::logic_error("host buckets: only the compact state has a start-up scratch");
  return {reinterpret_cast<float*>(base_.at(bucket)[static_cast<int>(Region::M)]),
          static_cast<size_t>(layout_.buckets()[bucket].numel)};
}

std::span<float> HostBuckets::fp32(int bucket, Region r) const {
  check_region(bucket, r);
  if (compact_) throw std::logic_error("host buckets: the compact state keeps no fp32 region");
  return {reinterpret_cast<float*>(base_.at(bucket)[static_cast<int>(r)]),
          static_cast<size_t>(layout_.buckets()[bucket].numel)};
}

}  // namespace ferry::memory
