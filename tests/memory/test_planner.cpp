// The pre-allocation Planner: properties on thousands of random instances (no two live tensors overlap,
// alignment kept, peak >= lower bound, deterministic), edge cases, and the checker itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <tuple>

#include "memory/planner.h"
#include "models/gpt2.h"
#include "foundation/rng.h"

namespace ferry::memory {
namespace {

std::vector<TensorLifetime> random_instance(Rng& rng, int n, int ops) {
  std::vector<TensorLifetime> t(n);
  for (auto& x : t) {
    const int kind = static_cast<int>(rng.below(10));
    x.bytes = kind == 0 ? 0 : static_cast<int64_t>(1 + rng.below(kind < 8 ? 4096 : 1 << 20));
    x.alignment = int64_t(1) << rng.below(9);  // 1 .. 256
    x.first = static_cast<int>(rng.below(ops));
    x.last = x.first + static_cast<int>(rng.below(std::max(1, ops / (kind < 5 ? 20 : 2))));
  }
  return t;
}

TEST(Planner, RandomInstancesGiveValidPlansAboveTheLowerBound) {
  Rng rng(2024);
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = 1 + static_cast<int>(rng.below(trial < 2900 ? 40 : 600));
    const auto tensors = random_instance(rng, n, 1 + static_cast<int>(rng.below(60)));
    const ArenaLayout p = Planner::plan(tensors);
    ASSERT_EQ(Planner::check(tensors, p), "") << "trial " << trial;
    ASSERT_GE(p.peak, p.lower_bound) << "trial " << trial;
    ASSERT_EQ(p.lower_bound, Planner::lower_bound(tensors));
    int64_t sum = 0;
    for (const auto& t : tensors) sum += t.bytes + t.alignment;
    ASSERT_LE(p.peak, sum);
    const ArenaLayout again = Planner::plan(tensors);
    ASSERT_EQ(again.offsets, p.offsets) << "not deterministic, trial " << trial;
  }
}

// In-place pairs (a tensor written over one whose last use is its first): on random instances, each pair at one
// offset, every other pair of live tensors apart, the peak no lower than the bound that counts a pair once where
// its two meet; a pair the lifetimes do not allow is refused.
TEST(Planner, TensorsWrittenInPlaceShareTheirOffsetAndCountOnce) {
  Rng rng(77);
  int pairs = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    auto tensors = random_instance(rng, 2 + static_cast<int>(rng.below(40)), 1 + static_cast<int>(rng.below(30)));
    std::vector<bool> used(tensors.size(), false);
    for (size_t t = 0; t < tensors.size(); ++t) {  // a few in place of a tensor that dies where they begin
      const auto s = static_cast<size_t>(rng.below(tensors.size()));
      if (s == t || used[s] || used[t] || rng.below(4) != 0) continue;
      tensors[t].first = tensors[s].last;
      tensors[t].last = std::max(tensors[t].last, tensors[t].first);
      tensors[t].in_place_of = static_cast<int>(s), used[s] = used[t] = true, ++pairs;
    }
    const ArenaLayout p = Planner::plan(tensors);
    ASSERT_EQ(Planner::check(tensors, p), "") << "trial " << trial;
    ASSERT_GE(p.peak, p.lower_bound) << "trial " << trial;
    for (size_t t = 0; t < tensors.size(); ++t) {
      if (tensors[t].in_place_of >= 0) {
        ASSERT_EQ(p.offsets[t], p.offsets[tensors[t].in_place_of]) << "trial " << trial;
      }
    }
  }
  EXPECT_GT(pairs, 500);
  // Two tensors of 100 bytes meeting at op 1: 200 bytes apart, 100 in place.
  std::vector<TensorLifetime> two{{100, 1, 0, 1}, {100, 1, 1, 2}};
  EXPECT_EQ(Planner::lower_bound(two), 200);
  two[1].in_place_of = 0;
  EXPECT_EQ(Planner::lower_bound(two), 100);
  EXPECT_EQ(Planner::plan(two).peak, 100);
  two[1].first = 2;  // the taken tensor is dead before: not in place of it
  EXPECT_THROW(Planner::plan(two), std::invalid_argument);
}

TEST(Planner, TensorsThatNeverMeetShareMemory) {
  // A chain: each tensor dies before the next is born, so all fit in the largest one.
  std::vector<TensorLifetime> chain;
  for (int i = 0; i < 50; ++i) chain.push_back({int64_t(1000 + i * 10), 256, i, i});
  const ArenaLayout p = Planner::plan(chain);
  EXPECT_EQ(p.peak, 1490);
  EXPECT_EQ(p.lower_bound, 1490);
}

TEST(Planner, EdgeCases) {
  EXPECT_EQ(Planner::plan({}).peak, 0);
  const std::vector<TensorLifetime> one{{100, 64, 3, 7}};
  EXPECT_EQ(Planner::plan(one).peak, 100);
  EXPECT_EQ(Planner::plan(one).offsets, std::vector<int64_t>{0});
  // All alive at once (sizes already aligned): the peak is their sum, exactly the lower bound.
  std::vector<TensorLifetime> all;
  for (int i = 0; i < 20; ++i) all.push_back({256 * (i + 1), 256, 0, 5});
  const ArenaLayout p = Planner::plan(all);
  EXPECT_EQ(p.peak, p.lower_bound);
  EXPECT_EQ(Planner::check(all, p), "");
  // Zero-size tensors take no room.
  const std::vector<TensorLifetime> zeros{{0, 256, 0, 9}, {0, 1, 2, 3}};
  EXPECT_EQ(Planner::plan(zeros).peak, 0);
  EXPECT_THROW(Planner::plan(std::vector<TensorLifetime>{{8, 3, 0, 1}}), std::invalid_argument);  // alignment
  EXPECT_THROW(Planner::plan(std::vector<TensorLifetime>{{8, 4, 5, 1}}), std::invalid_argument);  // last < first
}

TEST(Planner, CheckerCatchesOverlapAndMisalignment) {
  const std::vector<TensorLifetime> t{{512, 256, 0, 4}, {512, 256, 2, 6}};
  ArenaLayout p = Planner::plan(t);
  ASSERT_EQ(Planner::check(t, p), "");
  ArenaLayout bad = p;
  bad.offsets[1] = bad.offsets[0] + 256;
  bad.peak = std::max(bad.peak, bad.offsets[1] + 512);
  EXPECT_NE(Planner::check(t, bad).find("overlap"), std::string::npos);
  bad = p;
  bad.offsets[1] += 8;
  bad.peak += 8;
  EXPECT_NE(Planner::check(t, bad).find("alignment"), std::string::npos);
  // A peak below a tensor's end: the arena sized by it would not hold that tensor.
  bad = p;
  bad.peak -= 256;
  EXPECT_NE(Planner::check(t, bad).find("beyond the peak"), std::string::npos);
  // Tensors that meet at one op only (the last use of one is the first of the other) are alive together there.
  const std::vector<TensorLifetime> meet{{512, 256, 0, 2}, {512, 256, 2, 4}};
  ArenaLayout shared;
  shared.offsets = {0, 256};
  shared.peak = 768;
  EXPECT_NE(Planner::check(meet, shared).find("overlap"), std::string::npos);
}

}  // namespace
}  // namespace ferry::memory

namespace ferry::memory {
namespace {

TEST(Planner, Gpt2StepActivationsPlanValidlyNearTheLowerBound) {
  for (const auto& [cfg, B, T] : {std::tuple(models::GptConfig{12, 12, 768, 50257, 1024}, 4, 1024),
                                  std::tuple(models::GptConfig{4, 4, 128, 256, 128}, 16, 128),
                                  std::tuple(models::GptConfig{2, 4, 64, 101, 32}, 2, 32)}) {
    const models::ModelSpec spec = models::build_gpt2(cfg, B, T);
    const std::vector<TensorLifetime> t = spec.tensor_lifetimes();
    const ArenaLayout p = Planner::plan(t);
    EXPECT_EQ(Planner::check(t, p), "");
    EXPECT_LE(double(p.peak) / double(p.lower_bound), 1.03) << cfg.n_layer << " layers";
    int64_t sum = 0;
    for (const auto& x : t) sum += x.bytes;
    EXPECT_LT(p.peak, 0.8 * double(sum)) << "activations that never meet should share memory";
  }
}

}  // namespace
}  // namespace ferry::memory
