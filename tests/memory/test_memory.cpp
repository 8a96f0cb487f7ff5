// Parameter buckets and their host regions, the pinned pool, and the device arena.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <set>

#include "engine/device/cuda_devices.h"
#include "memory/arena.h"
#include "memory/device_allocations.h"
#include "memory/bucket_layout.h"
#include "memory/host_buckets.h"
#include "memory/pinned_pool.h"
#include "models/gpt2.h"
#include "foundation/rng.h"

namespace ferry::memory {
namespace {

std::vector<BucketLayout::Param> random_params(Rng& rng, int n) {
  std::vector<BucketLayout::Param> p;
  for (int i = 0; i < n; ++i) {
    const int64_t rows = 1 + rng.below(300), cols = rng.below(3) == 0 ? 1 : 1 + rng.below(500);
    p.push_back({n - 1 - i, cols == 1 ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, cols}});
  }
  return p;
}

TEST(BucketLayout, RandomParametersPackInOrderWithoutStraddling) {
  Rng rng(77);
  for (int trial = 0; trial < 300; ++trial) {
    const auto params = random_params(rng, 1 + static_cast<int>(rng.below(80)));
    const int64_t target = 2 * (1 + rng.below(200000));
    const DType travelling = rng.below(2) ? DType::BF16 : DType::F32;
    const BucketLayout layout(params, target, travelling);
    size_t next = 0;  // parameters appear in the given order, bucket after bucket
    for (size_t b = 0; b < layout.buckets().size(); ++b) {
      const auto& bucket = layout.buckets()[b];
      ASSERT_FALSE(bucket.params.empty());
      int64_t end = 0, used = 0;
      for (int id : bucket.params) {
        ASSERT_EQ(id, params[next++].id);
        const auto& s = layout.slot(id);
        ASSERT_EQ(s.bucket, static_cast<int>(b));
        ASSERT_EQ(s.offset % BucketLayout::kAlignElements, 0);
        ASSERT_GE(s.offset, end);  // no overlap, in order
        end = s.offset + s.numel;
        used = end;
      }
      ASSERT_LE(end, bucket.numel);
      // Over the target only when the bucket holds a single parameter larger than it.
      if (used * dtype_bytes(travelling) > target) {
        ASSERT_EQ(bucket.params.size(), 1u);
      }
      // Greedy: the next bucket's first parameter would not have fit in this one.
      if (b + 1 < layout.buckets().size()) {
        const auto& s = layout.slot(layout.buckets()[b + 1].params.front());
        ASSERT_GT((bucket.numel + s.numel) * dtype_bytes(travelling), target);
      }
    }
    ASSERT_EQ(next, params.size());
  }
}

TEST(BucketLayout, Gpt2SmallInFirstUseOrder) {
  const models::ModelSpec spec = models::build_gpt2({12, 12, 768, 50257, 1024}, 1, 8);
  std::vector<BucketLayout::Param> params;
  for (int id : spec.params_in_first_use_order()) params.push_back({id, spec.params[id].shape});
  EXPECT_EQ(spec.params[params.front().id].name, "transformer.wte.weight");
  const BucketLayout layout(params, BucketLayout::kDefaultBucketBytes, DType::BF16);
  const std::vector<int64_t> numels = models::param_numels(spec);  // the padded vocabulary's rows included
  const int64_t stored = std::accumulate(numels.begin(), numels.end(), int64_t{0});
  EXPECT_GE(layout.total_numel(), stored);
  EXPECT_LT(layout.total_numel(), stored + 148 * BucketLayout::kAlignElements);
  // wte (77 MB in bf16) is bigger than a bucket and travels alone; each block (14 MB) fits in one.
  EXPECT_EQ(layout.buckets()[0].params.size(), 1u);
  EXPECT_EQ(layout.slot(spec.param_index("transformer.h.5.ln_1.weight")).bucket,
            layout.slot(spec.param_index("transformer.h.5.mlp.c_proj.bias")).bucket);
  EXPECT_THROW(BucketLayout(params, 0, DType::BF16), std::invalid_argument);
}

TEST(HostBuckets, RegionsAndViewsAreDisjointAlignedAndTyped) {
  Rng rng(5);
  const auto params = random_params(rng, 40);
  const BucketLayout layout(params, 300000, DType::BF16);
  PinnedHostPool pool(HostBuckets::bytes_needed(layout, DType::BF16, DType::BF16), {});
  const HostBuckets host(layout, pool, DType::BF16, DType::BF16);
  EXPECT_LE(pool.used(), pool.size());
  using R = HostBuckets::Region;
  // Fill every view of every parameter with a pattern of its own, then read them all back.
  for (const auto& p : params) {
    for (R r : {R::Master, R::M, R::V, R::Working, R::Grad}) {
      const TensorView v = host.view(p.id, r);
      ASSERT_EQ(reinterpret_cast<uintptr_t>(v.data) % 256, 0u);
      ASSERT_EQ(v.shape, p.shape);
      ASSERT_EQ(v.dtype, r == R::Working || r == R::Grad ? DType::BF16 : DType::F32);
      std::memset(v.data, (p.id * 5 + static_cast<int>(r)) & 0xff, static_cast<size_t>(v.bytes()));
    }
  }
  for (const auto& p : params) {
    for (R r : {R::Master, R::M, R::V, R::Working, R::Grad}) {
      const TensorView v = host.view(p.id, r);
      const auto* b = static_cast<const unsigned char*>(v.data);
      for (int64_t i = 0; i < v.bytes(); ++i) ASSERT_EQ(b[i], (p.id * 5 + static_cast<int>(r)) & 0xff) << p.id;
    }
  }
  // A bucket's fp32 regions span exactly its padded element count.
  EXPECT_EQ(host.master(0).size(), static_cast<size_t>(layout.buckets()[0].numel));
}

// The compact state (optim.state: compact): no master, bf16 m and v, 8 bytes a parameter with bf16 working
// copies and gradients (page padding aside); the start-up scratch is a bucket's m and v, seen as fp32.
TEST(HostBuckets, TheCompactStateHoldsEightBytesAParameterAndNoMaster) {
  Rng rng(6);
  const auto params = random_params(rng, 40);
  const BucketLayout layout(params, 300000, DType::BF16);
  int64_t numel = 0;
  for (const auto& b : layout.buckets()) numel += b.numel;
  const int64_t compact = HostBuckets::bytes_needed(layout, DType::BF16, DType::BF16, true);
  const int64_t exact = HostBuckets::bytes_needed(layout, DType::BF16, DType::BF16);
  const int64_t padding = 4 * 4096 * static_cast<int64_t>(layout.buckets().size());  // at most a page a region
  EXPECT_GE(compact, 8 * numel);
  EXPECT_LE(compact, 8 * numel + padding);
  EXPECT_GE(exact, 16 * numel);
  PinnedHostPool pool(compact, {});
  const HostBuckets host(layout, pool, DType::BF16, DType::BF16, true);
  EXPECT_TRUE(host.compact());
  using R = HostBuckets::Region;
  for (const auto& p : params) {
    for (R r : {R::M, R::V, R::Working, R::Grad}) EXPECT_EQ(host.view(p.id, r).dtype, DType::BF16);
    EXPECT_THROW(host.view(p.id, R::Master), std::logic_error);
  }
  EXPECT_THROW(host.master(0), std::logic_error);
  for (int b = 0; b < static_cast<int>(layout.buckets().size()); ++b) {
    const std::span<float> scratch = host.compact_scratch(b);
    ASSERT_EQ(scratch.size(), static_cast<size_t>(layout.buckets()[b].numel));
    EXPECT_EQ(static_cast<void*>(scratch.data()), host.region(b, R::M).data);
    // It ends within m and v: the working copy after them is not overwritten.
    EXPECT_LE(reinterpret_cast<std::byte*>(scratch.data() + scratch.size()),
              host.region(b, R::V).as<std::byte>() + host.region(b, R::V).bytes() + 4096);
    EXPECT_LE(reinterpret_cast<std::byte*>(scratch.data() + scratch.size()),
              host.region(b, R::Working).as<std::byte>());
  }
}

// Gradients landing on the working copy (the exact state where the executor allows it): one region for both,
// 14 bytes a parameter in bf16 (page padding aside), where they take 16 in regions of their own; a frozen
// bucket's gradients are still the shared zeros, never its working copy.
TEST(HostBuckets, GradientsLandingOnTheWorkingCopyTakeFourteenBytesAParameter) {
  Rng rng(7);
  auto params = random_params(rng, 40);
  for (size_t i = 0; i < 8; ++i) params[i].frozen = true;
  const BucketLayout layout(params, 300000, DType::BF16);
  int64_t trained = 0, frozen_numel = 0, largest_frozen = 0;
  for (const auto& b : layout.buckets()) {
    (b.frozen ? frozen_numel : trained) += b.numel;
    if (b.frozen) largest_frozen = std::max(largest_frozen, b.numel);
  }
  using Landing = HostBuckets::GradLanding;
  const int64_t shared = HostBuckets::bytes_needed(layout, DType::BF16, DType::BF16, false, Landing::OnWorkingCopy);
  const int64_t own = HostBuckets::bytes_needed(layout, DType::BF16, DType::BF16, false, Landing::OwnRegion);
  // A frozen bucket holds its master and working copy (6 bytes), beside the zeros; at most a page a region.
  const int64_t frozen_bytes = 6 * frozen_numel + 4 * largest_frozen,
                padding = 5 * 4096 * static_cast<int64_t>(layout.buckets().size() + 1);
  EXPECT_GE(shared, 14 * trained + frozen_bytes);
  EXPECT_LE(shared, 14 * trained + frozen_bytes + padding);
  EXPECT_GE(own - shared, 2 * trained);
  EXPECT_LE(HostBuckets::bytes_needed(layout, DType::F32, DType::F32, false, Landing::OnWorkingCopy),
            16 * trained + 8 * frozen_numel + 4 * largest_frozen + padding);
  PinnedHostPool pool(shared, {});
  const HostBuckets host(layout, pool, DType::BF16, DType::BF16, false, Landing::OnWorkingCopy);
  EXPECT_EQ(host.grad_landing(), Landing::OnWorkingCopy);
  using R = HostBuckets::Region;
  int frozen = 0;
  for (int b = 0; b < static_cast<int>(layout.buckets().size()); ++b) {
    const bool is_frozen = layout.buckets()[b].frozen;
    frozen += is_frozen;
    EXPECT_EQ(host.region(b, R::Grad).data == host.region(b, R::Working).data, !is_frozen) << b;
    EXPECT_EQ(host.region(b, R::Grad).dtype, DType::BF16);
  }
  EXPECT_GT(frozen, 0);
  EXPECT_THROW(HostBuckets::bytes_needed(layout, DType::BF16, DType::BF16, true, Landing::OnWorkingCopy),
               std::logic_error);
  EXPECT_THROW(HostBuckets::bytes_needed(layout, DType::BF16, DType::F32, false, Landing::OnWorkingCopy),
               std::logic_error);
}

// A bucket the device alone keeps (the device tier) takes no host byte: the pool holds the others' regions
// exactly, its own regions are refused, and a frozen bucket (no optimizer state on the device) cannot be left out.
TEST(HostBuckets, ABucketTheDeviceKeepsTakesNoHostBytes) {
  Rng rng(11);
  auto params = random_params(rng, 30);
  for (size_t i = 0; i < 8; ++i) params[i].frozen = true;
  const BucketLayout layout(params, 300000, DType::BF16);
  const int n = static_cast<int>(layout.buckets().size());
  ASSERT_GE(n, 4);
  using Landing = HostBuckets::GradLanding;
  std::vector<bool> on_device(n, false);
  int64_t device_numel = 0;
  for (int b = 1; b < n; b += 2)
    if (!layout.buckets()[b].frozen) on_device[b] = true, device_numel += layout.buckets()[b].numel;
  const int64_t all = HostBuckets::bytes_needed(layout, DType::BF16, DType::BF16, false, Landing::OnWorkingCopy);
  const int64_t some =
      HostBuckets::bytes_needed(layout, DType::BF16, DType::BF16, false, Landing::OnWorkingCopy, on_device);
  // Master, m and v in fp32 and the working copy its gradients land on: 14 bytes, at most a page a region more.
  EXPECT_GE(all - some, 14 * device_numel);
  EXPECT_LE(all - some, 14 * device_numel + 4 * 4096 * n);
  PinnedHostPool pool(some, {});
  const HostBuckets host(layout, pool, DType::BF16, DType::BF16, false, Landing::OnWorkingCopy, on_device);
  using R = HostBuckets::Region;
  for (int b = 0; b < n; ++b) {
    EXPECT_EQ(host.on_device(b), on_device[b]) << b;
    if (on_device[b]) EXPECT_THROW(host.region(b, R::Master), std::logic_error) << b;
    else EXPECT_NE(host.region(b, R::Working).data, nullptr) << b;
  }
  EXPECT_THROW(pool.carve(4096), std::runtime_error);  // exactly what bytes_needed said
  std::vector<bool> frozen_too = on_device;
  const auto frozen =
      std::find_if(layout.buckets().begin(), layout.buckets().end(), [](const auto& b) { return b.frozen; });
  ASSERT_NE(frozen, layout.buckets().end());
  frozen_too[frozen - layout.buckets().begin()] = true;
  EXPECT_THROW(HostBuckets::bytes_needed(layout, DType::BF16, DType::BF16, false, Landing::OnWorkingCopy, frozen_too),
               std::logic_error);
}

TEST(PinnedHostPool, CarvesAlignedRegionsAndSaysWhenFull) {
  PinnedHostPool pool(10000, {false, true});
  if (!pool.locked()) std::printf("mlock: %s\n", pool.lock_error().c_str());
  std::byte* a = pool.carve(100, 256);
  std::byte* b = pool.carve(100, 256);
  EXPECT_EQ(b - a, 256);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 256, 0u);
  EXPECT_THROW(pool.carve(20000), std::runtime_error);
  if (device::cuda_device_count() == 0) {
    EXPECT_THROW(PinnedHostPool(1 << 20, {true, false}), std::runtime_error);  // no CUDA build or no GPU
  }
}

TEST(Arena, OneAllocationBoundsCheckedAndCounted) {
  const int64_t before = DeviceAllocations::count();
  {
    Arena arena(Arena::Backing::Host, 1 << 20);
    EXPECT_EQ(DeviceAllocations::count(), before + 1);
    EXPECT_GE(DeviceAllocations::bytes_held(), 1 << 20);
    EXPECT_EQ(arena.at(4096, 100), arena.data() + 4096);
    EXPECT_THROW(arena.at((1 << 20) - 10, 100), std::out_of_range);
    EXPECT_THROW(arena.at(-1, 1), std::out_of_range);
    Arena moved = std::move(arena);
    EXPECT_EQ(moved.size(), 1 << 20);
    EXPECT_EQ(DeviceAllocations::count(), before + 1);  // moving allocates nothing
  }
  EXPECT_EQ(DeviceAllocations::bytes_held(), 0);
}

TEST(Arena, TouchedBytesAreTheHighestByteEverWritten) {
  Arena arena(Arena::Backing::Host, 4096);
  EXPECT_EQ(arena.touched_bytes(), 0);  // filled with the unwritten byte at start-up
  arena.data()[100] = std::byte{0};
  EXPECT_EQ(arena.touched_bytes(), 101);
  arena.data()[3000] = std::byte{7};
  arena.data()[3000] = Arena::kUnwritten;  // a write of the pattern itself cannot be told apart
  EXPECT_EQ(arena.touched_bytes(), 101);
  arena.data()[4095] = std::byte{1};
  EXPECT_EQ(arena.touched_bytes(), 4096);
}

TEST(Arena, CudaBacking) {
  if (device::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const int64_t before = DeviceAllocations::count();
  Arena arena(Arena::Backing::Cuda, 64 << 20);
  EXPECT_EQ(DeviceAllocations::count(), before + 1);
  EXPECT_NE(arena.data(), nullptr);
}

}  // namespace
}  // namespace ferry::memory
