// BucketLayout: greedy packing in first-use order.
#include "memory/bucket_layout.h"

#include <stdexcept>
#include <string>

namespace ferry::memory {

BucketLayout::BucketLayout(std::span<const Param> params, int64_t target_bytes, DType travelling)
    : target_bytes_(target_bytes), travelling_(travelling) {
  if (target_bytes <= 0) throw std::invalid_argument("bucket layout: the bucket size must be positive");
  int max_id = -1;
  for (const auto& p : params) max_id = std::max(max_id, p.id);
  slots_.resize(static_cast<size_t>(max_id + 1));
  const int64_t elem = dtype_bytes(travelling);
  for (const auto& p : params) {
    if (p.id < 0 || slots_[p.id].param >= 0)
      throw std::invalid_argument("bucket layout: parameter " + std::to_string(p.id) + " is negative or listed twice");
    int64_t numel = 1;
    for (int64_t d : p.shape) numel *= d;
    const int64_t padded = (numel + kAlignElements - 1) / kAlignElements * kAlignElements;
    // Start a new bucket when this parameter would push a non-empty one past the target, or when it is
    // frozen and the bucket is not (or the other way round).
    const bool full = !buckets_.empty() && !buckets_.back().params.empty() && (buckets_.back().numel + numel) * elem > target_bytes;
    if (buckets_.empty() || full || (!buckets_.back().params.empty() && buckets_.back().frozen != p.frozen)) buckets_.emplace_back();
    Bucket& b = buckets_.back();
    b.frozen = p.frozen;
    slots_[p.id] = {p.id, static_cast<int>(buckets_.size()) - 1, b.numel, numel, p.shape};
    b.params.push_back(p.id);
    b.numel += padded;
  }
}

const BucketLayout::Slot& BucketLayout::slot(int param) const {
  if (param < 0 || param >= static_cast<int>(slots_.size()) || slots_[param].param < 0)
    throw std::out_of_range("bucket layout: no parameter " + std::to_string(param));
  return slots_[param];
}

int64_t BucketLayout::total_numel() const {
  int64_t n = 0;
  for (const auto& b : buckets_) n += b.numel;
  return n;
}

}  // namespace ferry::memory
