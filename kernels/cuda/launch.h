// Launch maps of the CUDA kernels as pure functions (grid, block, elements per thread) and the index each
// (block, thread, k) touches: a 16-byte pack of elements (pack.h) where the operands allow it, else one element;
// in 32-bit where every index a thread forms fits, else 64-bit (a GPT-2 logits tensor (B*T, 50257) passes 2^31
// elements). The kernels call the same index functions; the host tests check that every element is written once
// and in bounds.
#pragma once

#include <algorithm>
#include <cstdint>

#include "foundation/precision.h"
#include "kernels/cuda/pack.h"

namespace ferry::kernels::cuda {

constexpr int kRowBlock = 256;  // most threads of a row kernel (8 warps)
constexpr int kElementwiseBlock = 256;
constexpr int64_t kMaxElementwiseGrid = 1 << 16;  // beyond: grid-stride, so the grid stays small and fixed
constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;
constexpr int64_t kColumnChunkRows = 64;   // rows summed by one thread of a column-partials kernel

// Elementwise over n elements in packs of `width` (n a multiple of it): thread g = block_id * block + thread takes
// packs g, g + stride, ... (stride = grid * block), pack p being elements [p * width, p * width + width).
struct ElementwiseMap {
  int64_t n, grid;
  int block;
  int64_t per_thread;  // loop trips of every thread; the last trips may fall beyond n and are skipped
  int width = 1;       // elements per pack: 1 (the scalar path) or a 16-byte pack's
};

inline ElementwiseMap elementwise_map(int64_t n, int width = 1) {
  const int64_t block = kElementwiseBlock, packs = n / width;
  const int64_t grid = std::clamp<int64_t>((packs + block - 1) / block, 1, kMaxElementwiseGrid);
  const int64_t stride = grid * block;
  return {n, grid, kElementwiseBlock, (packs + stride - 1) / stride, width};
}

FERRY_HD inline int64_t map_packs(const ElementwiseMap& m) { return m.n / m.width; }

// The pack index of trip k of (block_id, thread), in the kernel's index type I.
template <class I>
FERRY_HD I pack_index(const ElementwiseMap& m, I block_id, I thread, I k) {
  return (block_id * static_cast<I>(m.block) + thread) + k * static_cast<I>(m.grid * m.block);
}

FERRY_HD inline int64_t elementwise_index(const ElementwiseMap& m, int64_t block_id, int thread, int64_t k) {
  return pack_index<int64_t>(m, block_id, thread, k);
}

// Whether every index a thread of the map forms (before its bounds check: up to per_thread * stride packs, times
// the width) fits in int32, and the pack count it is checked against too (2^31 single elements: a count of 2^31,
// which int32 wraps to -2^31, though the last index, 2^31 - 1, fits).
inline bool fits_int32(const ElementwiseMap& m) {
  return m.per_thread * m.grid * m.block * m.width <= (int64_t{1} << 31) && m.n / m.width <= INT32_MAX;
}

// The map of an elementwise op over n elements of storage T whose operands are `p`: 16-byte packs when n is a
// multiple of the pack and every operand 16-byte aligned (and the indices fit in 32 bits), else one element per
// index. The launch function and the host twin take the same one.
template <class T, class... P>
ElementwiseMap elementwise_map_for(int64_t n, const P*... p) {
  const ElementwiseMap vector = elementwise_map(n, kPackWidth<T>);
  if (n % kPackWidth<T> == 0 && pack_aligned(p...) && fits_int32(vector)) return vector;
  return elementwise_map(n);
}

// Calls f(Width<W>{}, I{}) for the map's path: W its width as a constant, I the index type (int32 where every index
// fits: cheaper loop and address math; elementwise_map_for gives packs only where their indices fit).
template <class T, class F>
void with_path(const ElementwiseMap& m, F&& f) {
  if (!fits_int32(m)) return f(Width<1>{}, int64_t{});
  with_width<T>(m.width, [&](auto w) { f(w, int32_t{}); });
}

// One block per row of an (rows, cols) matrix whose rows lie `stride` elements apart (cross-entropy's logits of a
// padded vocabulary: the columns past cols are not the row's), its columns in packs of `width` (1, or a 16-byte
// pack's); thread t takes packs t, t + block, ... of its row, pack q being columns [q * width, q * width + width)
// (the last pack partial where width does not divide cols: its lanes past cols are neither used nor written).
// The block is as many warps as the row's packs need, at most kRowBlock: a GPT-2 row of 768 bf16 in packs of 8
// takes 96 threads, one pack each, where 256 would leave 160 idle.
struct RowMap {
  int64_t rows, cols, grid;
  int block;
  int64_t per_thread;
  int64_t stride;
  int width = 1;
};

inline RowMap row_map(int64_t rows, int64_t cols, int64_t stride, int width = 1) {
  const int64_t packs = (cols + width - 1) / width;
  const auto block = static_cast<int>(std::clamp<int64_t>((packs + 31) / 32 * 32, 32, kRowBlock));
  return {rows, cols, rows, block, (packs + block - 1) / block, stride, width};
}
inline RowMap row_map(int64_t rows, int64_t cols) { return row_map(rows, cols, cols); }

// The map of a row op over (rows, cols) of storage T, rows `stride` apart, whose operands are `p`: 16-byte packs
// when the stride is a multiple of the pack and every operand 16-byte aligned (then every pack starts aligned,
// and a partial last pack's 16 bytes still lie inside its row's stride), else single columns. Row-length
// operands (LayerNorm's w and b) are read by pack too: their ops have stride == cols, so no pack is partial.
// The launch function and the host twin take the same one.
template <class T, class... P>
RowMap row_map_for(int64_t rows, int64_t cols, int64_t stride, const P*... p) {
  const bool packs = stride % kPackWidth<T> == 0 && pack_aligned(p...);
  return row_map(rows, cols, stride, packs ? kPackWidth<T> : 1);
}

// The first column of thread t's pack k, and how many of its lanes lie in the row.
FERRY_HD inline int64_t row_col(const RowMap& m, int thread, int64_t k) { return (thread + k * m.block) * m.width; }
FERRY_HD inline int64_t row_index(const RowMap& m, int64_t row, int thread, int64_t k) {
  return row * m.stride + row_col(m, thread, k);
}
FERRY_HD inline int pack_lanes(const RowMap& m, int64_t col) {
  return m.cols - col < m.width ? static_cast<int>(m.cols - col) : m.width;
}

// Column partial sums of an (rows, cols) matrix: thread (bx, t) of chunk y sums rows
// [y * kColumnChunkRows, ...) of column bx * block + t, in row order; grid = (column blocks, chunks).
struct ColumnMap {
  int64_t rows, cols, grid_x, chunks;
  int block;
};

inline ColumnMap column_map(int64_t rows, int64_t cols) {
  return {rows, cols, (cols + kRowBlock - 1) / kRowBlock, std::max<int64_t>(1, (rows + kColumnChunkRows - 1) / kColumnChunkRows),
          kRowBlock};
}

FERRY_HD inline int64_t column_of(const ColumnMap& m, int64_t block_x, int thread) { return block_x * m.block + thread; }
FERRY_HD inline int64_t chunk_begin(const ColumnMap&, int64_t chunk) { return chunk * kColumnChunkRows; }
FERRY_HD inline int64_t chunk_end(const ColumnMap& m, int64_t chunk) {
  const int64_t e = (chunk + 1) * kColumnChunkRows;
  return e < m.rows ? e : m.rows;
}

// Sum of squares over n gradient elements: a fixed grid of blocks (a function of n only, never of the
// device, so the result is reproducible across GPUs), each writing one partial; one block folds them.
struct SumSquaresMap {
  ElementwiseMap pass1;
  int block2;
};

inline SumSquaresMap sum_squares_map(int64_t n) {
  ElementwiseMap m = elementwise_map(n);
  const int64_t grid = std::clamp<int64_t>((n + 8 * m.block - 1) / (8 * m.block), 1, 1024);  // >= 8 each
  m.grid = grid;
  m.per_thread = (n + grid * m.block - 1) / (grid * m.block);
  return {m, kRowBlock};
}

}  // namespace ferry::kernels::cuda
