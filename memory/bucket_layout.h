// BucketLayout: parameters grouped, in first-use order, into contiguous buckets of a target size, so that
// each transfer is big enough to saturate the link. A parameter never straddles two buckets; one larger
// than the target gets a bucket of its own. Every parameter starts 256-byte aligned in every region. Frozen
// parameters never share a bucket with trainable ones, so a frozen bucket has no gradients, no optimizer
// step and no upload at all.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "memory/tensor_view.h"

namespace ferry::memory {

class BucketLayout {
 public:
  // Until the cost model measures the link (offload.bucket_mb: auto), buckets hold up to 32 MiB of what
  // travels: large enough that a PCIe 4/5 copy runs near its peak, small enough to prefetch finely.
  static constexpr int64_t kDefaultBucketBytes = int64_t(32) << 20;
  // Offsets inside a bucket are multiples of 128 elements: 256 bytes in half precision, 512 in fp32.
  static constexpr int64_t kAlignElements = 128;

  struct Param {
    int id;                      // the caller's parameter index
    std::vector<int64_t> shape;
    bool frozen = false;         // never updated (models::ParamSpec::frozen)
  };
  struct Slot {
    int param = -1;
    int bucket = -1;
    int64_t offset = 0;  // elements from the start of the bucket
    int64_t numel = 0;
    std::vector<int64_t> shape;
  };
  struct Bucket {
    std::vector<int> params;  // in order
    int64_t numel = 0;        // padded: the regions of this bucket hold this many elements
    bool frozen = false;      // every parameter in it is frozen
  };

  // params: in first-use order. target_bytes: bucket size in bytes of `travelling` elements.
  BucketLayout(std::span<const Param> params, int64_t target_bytes, DType travelling);

  const std::vector<Bucket>& buckets() const { return buckets_; }
  const Slot& slot(int param) const;  // by the caller's parameter index
  int64_t target_bytes() const { return target_bytes_; }
  DType travelling() const { return travelling_; }
  int64_t total_numel() const;  // padded, over all buckets

 private:
  std::vector<Bucket> buckets_;
  std::vector<Slot> slots_;  // indexed by parameter id
  int64_t target_bytes_;
  DType travelling_;
};

}  // namespace ferry::memory
