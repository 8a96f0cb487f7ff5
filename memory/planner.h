// Planner: lays out every tensor that will ever live in the device arena, once, before the first step,
// from the tensors' sizes and live intervals over the step's op list. Tensors whose intervals overlap
// never overlap in memory; everything else may share, so memory is reused and nothing fragments.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ferry::memory {

struct TensorLifetime {
  int64_t bytes = 0;
  int64_t alignment = 256;  // a power of two
  int first = 0;            // first op that uses it
  int last = 0;             // last op that uses it (inclusive)
  // The tensor whose memory this one takes (-1: none): it is written in place of that tensor by the op that reads
  // that tensor last (first == that tensor's last), so the two are placed as one block from the one's first
  // use to the other's last.
  int in_place_of = -1;
};

// Where every tensor sits in the arena, and how big the arena must be (a tensor written in place of another at
// that one's offset).
struct ArenaLayout {
  std::vector<int64_t> offsets;  // one per tensor, aligned; zero-size tensors get 0
  int64_t peak = 0;              // bytes of arena the plan needs
  int64_t lower_bound = 0;       // the most bytes alive at any one op: no plan can need less
};

struct Planner {
  // Greedy by size with best-fit gaps (TFLite's arena planner, Pisarchyk & Lee 2020), tried with several
  // orderings of the tensors, keeping the plan with the lowest peak. Deterministic for the same input.
  // Orderings beyond the first are only tried while the instance is small enough to stay fast.
  static ArenaLayout plan(std::span<const TensorLifetime> tensors);

  // Checks a plan: alignment, and no two tensors alive at the same op overlapping in memory but a tensor and the
  // one it is written in place of, at the same offset. Returns an empty string when valid, else what is wrong
  // (for tests and debug builds).
  static std::string check(std::span<const TensorLifetime> tensors, const ArenaLayout& plan);

  // The bytes alive at each of ops 0..ops-1 (a tensor written in place of another counted once where both are
  // alive), and the most of them: no plan can need less.
  static std::vector<int64_t> live_bytes(std::span<const TensorLifetime> tensors, int ops);
  static int64_t lower_bound(std::span<const TensorLifetime> tensors);
};

}  // namespace ferry::memory
