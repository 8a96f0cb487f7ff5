// HostBuckets: region carving and views.
#include "memory/host_buckets.h"

#include <algorithm>

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

bool owned(const BucketLayout::Bucket& b, HostBuckets::Region r) {
  return !b.frozen || r == HostBuckets::Region::Master || r == HostBuckets::Region::Working;
}

}  // namespace

DType HostBuckets::dtype(Region r) const {
  return r == Region::Working ? working_ : r == Region::Grad ? grad_ : DType::F32;
}

int64_t HostBuckets::bytes_needed(const BucketLayout& layout, DType working, DType grad) {
  int64_t total = frozen_zero_bytes(layout);
  for (const auto& b : layout.buckets())
    total += region_bytes(b.numel, DType::F32) + region_bytes(b.numel, working) +
             (b.frozen ? 0 : 2 * region_bytes(b.numel, DType::F32) + region_bytes(b.numel, grad));
  return total;
}

HostBuckets::HostBuckets(const BucketLayout& layout, PinnedHostPool& pool, DType working, DType grad)
    : layout_(layout), working_(working), grad_(grad) {
  const int64_t zero_bytes = frozen_zero_bytes(layout);
  std::byte* zeros = zero_bytes > 0 ? pool.carve(zero_bytes, kRegionAlignment) : nullptr;  // the pool starts zeroed
  for (const auto& b : layout.buckets()) {
    std::array<std::byte*, 5> regions{};
    for (int r = 0; r < 5; ++r) {
      const Region region = static_cast<Region>(r);
      regions[r] = owned(b, region) ? pool.carve(region_bytes(b.numel, dtype(region)), kRegionAlignment) : zeros;
    }
    base_.push_back(regions);
  }
}

TensorView HostBuckets::region(int bucket, Region r) const {
  return {base_.at(bucket)[static_cast<int>(r)], {layout_.buckets()[bucket].numel}, dtype(r)};
}

TensorView HostBuckets::view(int param, Region r) const {
  const auto& s = layout_.slot(param);
  const DType t = dtype(r);
  return {base_[s.bucket][static_cast<int>(r)] + s.offset * dtype_bytes(t), s.shape, t};
}

std::span<float> HostBuckets::fp32(int bucket, Region r) const {
  return {reinterpret_cast<float*>(base_.at(bucket)[static_cast<int>(r)]),
          static_cast<size_t>(layout_.buckets()[bucket].numel)};
}

}  // namespace ferry::memory
