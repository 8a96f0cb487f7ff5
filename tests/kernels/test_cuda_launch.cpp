// Launch maps of the CUDA kernels (kernels/cuda/launch.h): every element written exactly once and in bounds,
// for odd sizes and past 2^31 elements (64-bit indices), within CUDA's grid limits.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/reduce.h"

namespace ferry::kernels::cuda {
namespace {

// Replays the kernel loop of every thread and counts the writes of each element.
void expect_elementwise_covers(int64_t n) {
  const ElementwiseMap m = elementwise_map(n);
  ASSERT_GE(m.grid, 1);
  ASSERT_LE(m.grid, kMaxGridX);
  std::vector<uint8_t> hits(n);
  for (int64_t b = 0; b < m.grid; ++b)
    for (int t = 0; t < m.block; ++t)
      for (int64_t k = 0; k < m.per_thread; ++k) {
        const int64_t i = elementwise_index(m, b, t, k);
        ASSERT_GE(i, 0);
        if (i < n) ++hits[i];
      }
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << "element " << i << " of " << n;
}

TEST(CudaLaunch, ElementwiseOddSizesCoveredOnce) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{255}, int64_t{257}, int64_t{50257}, int64_t{3} << 20,
                    kMaxElementwiseGrid * kElementwiseBlock * 3 + 17})
    expect_elementwise_covers(n);
}

// Past 2^31: each thread's trips, counted in closed form from the same index function, add up to n; the
// first and last elements and the ones around 2^31 and 2^32 belong to the thread the map says.
TEST(CudaLaunch, ElementwiseBeyond2To31) {
  for (int64_t n : {(int64_t{1} << 31) + 77, (int64_t{5} << 31) + 3}) {
    const ElementwiseMap m = elementwise_map(n);
    ASSERT_LE(m.grid, kMaxGridX);
    const int64_t stride = m.grid * m.block;
    int64_t total = 0;
    for (int64_t b = 0; b < m.grid; ++b)
      for (int t = 0; t < m.block; ++t) {
        int64_t trips = 0;  // the last trip with an index below n, found by bisection over k
        for (int64_t lo = 0, hi = m.per_thread; lo < hi;) {
          const int64_t mid = (lo + hi) / 2;
          if (elementwise_index(m, b, t, mid) < n) lo = mid + 1, trips = lo; else hi = mid;
        }
        total += trips;
      }
    EXPECT_EQ(total, n);
    for (int64_t i : {int64_t{0}, (int64_t{1} << 31) - 1, int64_t{1} << 31, (int64_t{1} << 32) + 5, n - 1}) {
      if (i >= n) continue;
      const int64_t g = i % stride;
      EXPECT_EQ(elementwise_index(m, g / m.block, static_cast<int>(g % m.block), i / stride), i);
      EXPECT_LT(i / stride, m.per_thread);
    }
  }
}

// One block per row: every (row, column) once, odd columns; the last index of a GPT-2 logits tensor
// (65536 x 50257 > 2^31) is computed without overflow.
TEST(CudaLaunch, RowMapCoversOddColumnsAndLargeTensors) {
  for (int64_t cols : {int64_t{1}, int64_t{7}, int64_t{255}, int64_t{257}, int64_t{769}, int64_t{50257}}) {
    const RowMap m = row_map(3, cols);
    std::vector<uint8_t> hits(3 * cols);
    for (int64_t r = 0; r < m.grid; ++r)
      for (int t = 0; t < m.block; ++t)
        for (int64_t k = 0; k < m.per_thread; ++k)
          if (row_col(m, t, k) < cols) ++hits[row_index(m, r, t, k)];
    for (int64_t i = 0; i < 3 * cols; ++i) ASSERT_EQ(hits[i], 1) << cols << " " << i;
  }
  const RowMap big = row_map(65536, 50257);
  ASSERT_LE(big.grid, kMaxGridX);
  const int64_t last_k = big.per_thread - 1;
  const int last_t = static_cast<int>((50257 - 1) - last_k * big.block);
  EXPECT_EQ(row_col(big, last_t, last_k), 50256);
  EXPECT_EQ(row_index(big, 65535, last_t, last_k), int64_t{65536} * 50257 - 1);
}

// Column partials: every (row, column) in exactly one (chunk, column) thread; chunks in row order.
TEST(CudaLaunch, ColumnMapCoversEveryRowOnce) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {63, 257}, {64, 3}, {65, 769}, {1000, 31}}) {
    const ColumnMap m = column_map(rows, cols);
    std::vector<uint8_t> hits(rows * cols);
    for (int64_t ch = 0; ch < m.chunks; ++ch)
      for (int64_t bx = 0; bx < m.grid_x; ++bx)
        for (int t = 0; t < m.block; ++t) {
          const int64_t c = column_of(m, bx, t);
          if (c >= cols) continue;
          for (int64_t r = chunk_begin(m, ch); r < chunk_end(m, ch); ++r) ++hits[r * cols + c];
        }
    for (int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(hits[i], 1) << rows << "x" << cols << " " << i;
  }
}

// The sum-of-squares grid depends on n only and covers it once.
TEST(CudaLaunch, SumSquaresMapCoversOnce) {
  for (int64_t n : {int64_t{1}, int64_t{2047}, int64_t{2049}, int64_t{10000019}}) {
    const SumSquaresMap m = sum_squares_map(n);
    ASSERT_LE(m.pass1.grid, 1024);
    std::vector<uint8_t> hits(n);
    for (int64_t b = 0; b < m.pass1.grid; ++b)
      for (int t = 0; t < m.pass1.block; ++t)
        for (int64_t k = 0; k < m.pass1.per_thread; ++k)
          if (const int64_t i = elementwise_index(m.pass1, b, t, k); i < n) ++hits[i];
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << n << " " << i;
  }
}

// The reduction order the kernels' shuffles follow, pinned with a merge that records it: lane s after the
// butterfly steps down to offset d is merge(lane s at 2d, lane s^d at 2d), so warp lane 0 pairs 0 with 16
// first and the even lanes with the odd ones last; the warp values then meet the same way, empty lanes
// beyond the warp count included.
TEST(CudaReduceOrder, ButterflyThenWarpLevel) {
  const auto merge = [](const std::string& a, const std::string& b) { return "(" + a + "+" + b + ")"; };
  std::function<std::string(int, int, int)> lane = [&](int base, int s, int d) -> std::string {
    if (d == kWarp) return std::to_string(base + s);
    return merge(lane(base, s, 2 * d), lane(base, s ^ d, 2 * d));
  };
  for (int block : {32, 64, 256}) {
    std::vector<std::string> partial(block);
    for (int t = 0; t < block; ++t) partial[t] = std::to_string(t);
    std::vector<std::string> warp_values(kWarp, "e");
    for (int w = 0; w < block / kWarp; ++w) warp_values[w] = lane(w * kWarp, 0, 1);
    std::function<std::string(int, int)> top = [&](int s, int d) -> std::string {
      return d == kWarp ? warp_values[s] : merge(top(s, 2 * d), top(s ^ d, 2 * d));
    };
    EXPECT_EQ(block_reduce_twin(partial.data(), block, std::string("e"), merge), top(0, 1)) << block;
  }
  std::string lanes[kWarp];
  for (int l = 0; l < kWarp; ++l) lanes[l] = std::to_string(l);
  EXPECT_EQ(warp_tree_twin(lanes, merge).substr(0, 36), "(((((0+16)+(8+24))+((4+20)+(12+28)))");
}

}  // namespace
}  // namespace ferry::kernels::cuda
