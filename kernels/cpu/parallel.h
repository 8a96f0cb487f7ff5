// Deterministic parallel loops for the CPU ops: ranges are split into fixed chunks, independent of the
// thread count, so every reduction adds in the same order on every run.
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include <algorithm>
#include <cstdint>

namespace ferry::kernels::cpu {

// Calls body(begin, end) over [0, n) in chunks of `grain` (the last one shorter), in parallel.
template <class Body>
void parallel_chunks(int64_t n, int64_t grain, Body&& body) {
  if (n <= 0) return;
  const int64_t chunks = (n + grain - 1) / grain;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, chunks, 1), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t c = r.begin(); c != r.end(); ++c) body(c * grain, std::min(n, (c + 1) * grain));
  }, tbb::simple_partitioner());
}

}  // namespace ferry::kernels::cpu
