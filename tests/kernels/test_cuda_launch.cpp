// Launch maps of the CUDA kernels (kernels/cuda/launch.h): every element written exactly once and in bounds,
// for odd sizes and past 2^31 elements (64-bit indices), within CUDA's grid limits; the vector paths' packs
// (16 bytes of elements) likewise, and the path each shape and alignment takes.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "foundation/precision.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/reduce.h"

namespace ferry::kernels::cuda {
namespace {

// Replays the kernel loop of every thread (in index type I, as the kernel runs it) and counts the writes of each
// pack p, elements [p * width, p * width + width): together the packs are the n elements, each once.
template <class I = int64_t>
void expect_elementwise_covers(int64_t n, int width = 1) {
  const ElementwiseMap m = elementwise_map(n, width);
  ASSERT_GE(m.grid, 1);
  ASSERT_LE(m.grid, kMaxGridX);
  ASSERT_EQ(map_packs(m) * width, n);
  std::vector<uint8_t> hits(map_packs(m));
  for (int64_t b = 0; b < m.grid; ++b)
    for (int t = 0; t < m.block; ++t)
      for (int64_t k = 0; k < m.per_thread; ++k) {
        const I p = pack_index<I>(m, static_cast<I>(b), static_cast<I>(t), static_cast<I>(k));
        ASSERT_GE(p, 0);
        if (p < map_packs(m)) ++hits[p];
      }
  for (int64_t p = 0; p < map_packs(m); ++p) ASSERT_EQ(hits[p], 1) << "pack " << p << " of " << n << " / " << width;
}

TEST(CudaLaunch, ElementwiseOddSizesCoveredOnce) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{255}, int64_t{257}, int64_t{50257}, int64_t{3} << 20,
                    kMaxElementwiseGrid * kElementwiseBlock * 3 + 17})
    expect_elementwise_covers(n);
}

// Packs of 4 (fp32) and 8 (bf16, fp16) in 32-bit indices: sizes of one pack, part of a block, several grid-stride
// trips with the last one partial, GPT-2's B*T*4C (16 x 1024 x 3072 bf16 elements: 6.3M packs).
TEST(CudaLaunch, ElementwisePacksCoveredOnce) {
  for (int width : {4, 8})
    for (int64_t packs : {int64_t{1}, int64_t{255}, int64_t{257}, kMaxElementwiseGrid * kElementwiseBlock * 2 + 31,
                          int64_t{16} * 1024 * 3072 / 8})
      expect_elementwise_covers<int32_t>(packs * width, width);
}

// The path of an elementwise op: packs where n is a multiple of the pack (8 bf16, 4 fp32) and every operand is
// 16-byte aligned (null ones aside), single elements otherwise; 32-bit indices while every index a thread forms
// fits, and past that single elements in 64-bit.
TEST(CudaLaunch, ElementwisePathFollowsSizeAndAlignment) {
  alignas(16) static Bf16 buf[64];
  const auto path = [](const ElementwiseMap& m) {
    int width = 0;
    size_t index_bytes = 0;
    with_path<Bf16>(m, [&](auto w, auto index) { width = decltype(w)::value, index_bytes = sizeof(index); });
    EXPECT_EQ(width, m.width);
    return std::pair<int, size_t>{width, index_bytes};
  };
  EXPECT_EQ(path(elementwise_map_for<Bf16>(64, buf, buf + 8, static_cast<const Bf16*>(nullptr))),
            (std::pair<int, size_t>{8, 4}));
  EXPECT_EQ(path(elementwise_map_for<Bf16>(60, buf, buf + 8)), (std::pair<int, size_t>{1, 4}));  // 60 % 8
  EXPECT_EQ(path(elementwise_map_for<Bf16>(56, buf, buf + 1)), (std::pair<int, size_t>{1, 4}));  // 2 bytes off
  EXPECT_EQ(elementwise_map_for<float>(64, reinterpret_cast<float*>(buf)).width, 4);
  EXPECT_EQ(elementwise_map_for<float>(64, reinterpret_cast<float*>(buf) + 2).width, 1);
  // 2^31 elements in packs of 8: the last index a thread forms is 2^31 - 1, which fits; 8 more do not.
  const int64_t edge = int64_t{1} << 31;
  EXPECT_EQ(path(elementwise_map_for<Bf16>(edge, buf)), (std::pair<int, size_t>{8, 4}));
  EXPECT_EQ(path(elementwise_map_for<Bf16>(edge + 8, buf)), (std::pair<int, size_t>{1, 8}));
}

// Where the 32-bit path is taken, every index a thread forms (its last trip's, before the bounds check, and the
// last lane of its pack) is the same in int32 as in int64: no overflow at the largest sizes that take it.
TEST(CudaLaunch, Int32IndicesDoNotOverflowWhereTaken) {
  for (int64_t n : {(int64_t{1} << 31) - 8, int64_t{1} << 31, (int64_t{1} << 31) - 8 * 1000}) {
    const ElementwiseMap m = elementwise_map(n, 8);
    ASSERT_TRUE(fits_int32(m)) << n;
    const int64_t last = m.per_thread - 1;
    for (int64_t b = 0; b < m.grid; ++b)
      for (int t = 0; t < m.block; ++t) {
        const int32_t p32 = pack_index<int32_t>(m, static_cast<int32_t>(b), t, static_cast<int32_t>(last));
        const int64_t p64 = pack_index<int64_t>(m, b, t, last);
        ASSERT_EQ(p32, p64) << n << " block " << b << " thread " << t;
        ASSERT_LE(p64 * 8 + 7, INT32_MAX);
      }
  }
  const ElementwiseMap scalar = elementwise_map((int64_t{1} << 31) + 1);
  EXPECT_FALSE(fits_int32(scalar));  // the scalar path past 2^31 stays 64-bit
}

// The kernel's loop also holds the pack count in its index type (for_each_pack's bound): at exactly 2^31 single
// elements (an aligned size whose operands are not: the scalar path) the count is 2^31, which int32 wraps to
// -2^31, and every thread would leave before its first element. Where 32-bit is taken, the count fits too.
TEST(CudaLaunch, Int32PathHoldsThePackCount) {
  const int64_t edge = int64_t{1} << 31;
  for (int width : {1, 4, 8})
    for (int64_t n : {edge - 8 * width, edge - width, edge, edge + width}) {
      const ElementwiseMap m = elementwise_map(n, width);
      if (fits_int32(m)) {
        EXPECT_LE(map_packs(m), INT32_MAX) << n << " / " << width;
      }
    }
  alignas(16) static Bf16 buf[16];
  size_t index_bytes = 0;
  with_path<Bf16>(elementwise_map_for<Bf16>(edge, buf + 1), [&](auto, auto index) { index_bytes = sizeof(index); });
  EXPECT_EQ(index_bytes, 8u) << "2^31 single elements take 64-bit indices";
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

// Rows in packs: every (row, column) once, no lane past the row's stride (a partial last pack's lanes past cols
// are read, inside the stride, but never counted); the block is the warps the packs need, at most kRowBlock.
TEST(CudaLaunch, RowPacksCoverEveryColumnOnce) {
  struct Case {
    int64_t cols, stride;
    int width, block;
  };
  const Case cases[] = {{768, 768, 8, 96},    {768, 768, 4, 192},     {3072, 3072, 8, 256}, {8, 8, 8, 32},
                        {1600, 1600, 8, 224}, {50257, 50304, 8, 256}, {37, 40, 4, 32},      {1, 8, 8, 32}};
  for (const Case& c : cases) {
    const int64_t rows = 3;
    const RowMap m = row_map(rows, c.cols, c.stride, c.width);
    EXPECT_EQ(m.block, c.block) << c.cols;
    ASSERT_EQ(m.block % 32, 0);
    std::vector<uint8_t> hits(rows * c.stride);
    for (int64_t r = 0; r < m.grid; ++r)
      for (int t = 0; t < m.block; ++t)
        for (int64_t k = 0; k < m.per_thread; ++k) {
          const int64_t col = row_col(m, t, k);
          if (col >= c.cols) continue;
          ASSERT_EQ(col % c.width, 0);
          ASSERT_LE(col + c.width, c.stride) << "a pack reads past its row";
          for (int j = 0; j < pack_lanes(m, col); ++j) ++hits[row_index(m, r, t, k) + j];
        }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t col = 0; col < c.stride; ++col)
        ASSERT_EQ(hits[r * c.stride + col], col < c.cols ? 1 : 0) << c.cols << " row " << r << " column " << col;
  }
}

// Llama 3's logits in packs: 16 x 2048 rows of its 128256-token vocabulary (a multiple of 128: no padding) are
// 4.2G elements, past 2^31 (8 x 2048 rows, 2.10G, stay just under it); the row kernels' indices are 64-bit, so
// the last pack of the last row ends at the tensor's end.
TEST(CudaLaunch, RowPacksIndexLlama3Logits) {
  const int64_t rows = 16 * 2048, V = 128256;
  const RowMap m = row_map(rows, V, V, 8);
  ASSERT_LE(m.grid, kMaxGridX);
  const int64_t last_k = m.per_thread - 1, packs = V / 8;
  const int last_t = static_cast<int>((packs - 1) - last_k * m.block);
  ASSERT_GE(last_t, 0);
  ASSERT_EQ(row_col(m, last_t, last_k), V - 8);
  EXPECT_EQ(pack_lanes(m, V - 8), 8);
  EXPECT_EQ(row_index(m, rows - 1, last_t, last_k) + 8, rows * V);
  EXPECT_GT(rows * V, int64_t{1} << 31);
}

// The path of a row op: packs where the stride is a multiple of the pack and every operand aligned.
TEST(CudaLaunch, RowPathFollowsStrideAndAlignment) {
  alignas(16) static Bf16 buf[64];
  EXPECT_EQ(row_map_for<Bf16>(4, 768, 768, buf, buf + 8).width, 8);
  EXPECT_EQ(row_map_for<Bf16>(4, 50257, 50304, buf).width, 8);  // GPT-2's padded vocabulary
  EXPECT_EQ(row_map_for<Bf16>(4, 50257, 50257, buf).width, 1);
  EXPECT_EQ(row_map_for<Bf16>(4, 37, 37, buf).width, 1);
  EXPECT_EQ(row_map_for<Bf16>(4, 768, 768, buf, buf + 1).width, 1);
  EXPECT_EQ(row_map_for<float>(4, 768, 768, reinterpret_cast<float*>(buf)).width, 4);
  EXPECT_EQ(row_map_for<float>(4, 770, 770, reinterpret_cast<float*>(buf)).width, 1);
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
