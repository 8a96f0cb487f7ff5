// Launch maps of the CUDA kernels as pure functions (grid, block, elements per thread) and the index each
// (block, thread, k) touches, in 64-bit: a GPT-2 logits tensor (B*T, 50257) passes 2^31 elements. The kernels
// call the same index functions; the host tests check that every element is written once and in bounds.
#pragma once

#include <algorithm>
#include <cstdint>

#include "foundation/precision.h"

namespace ferry::kernels::cuda {

constexpr int kRowBlock = 256;             // threads of a row kernel (8 warps)
constexpr int kElementwiseBlock = 256;
constexpr int64_t kMaxElementwiseGrid = 1 << 16;  // beyond: grid-stride, so the grid stays small and fixed
constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;
constexpr int64_t kColumnChunkRows = 64;   // rows summed by one thread of a column-partials kernel

// Elementwise over n: thread g = block_id * block + thread takes g, g + stride, ... (stride = grid * block).
struct ElementwiseMap {
  int64_t n, grid;
  int block;
  int64_t per_thread;  // loop trips of every thread; the last trips may fall beyond n and are skipped
};

inline ElementwiseMap elementwise_map(int64_t n) {
  const int64_t block = kElementwiseBlock;
  const int64_t grid = std::clamp<int64_t>((n + block - 1) / block, 1, kMaxElementwiseGrid);
  const int64_t stride = grid * block;
  return {n, grid, kElementwiseBlock, (n + stride - 1) / stride};
}

FERRY_HD inline int64_t elementwise_index(const ElementwiseMap& m, int64_t block_id, int thread, int64_t k) {
  return (block_id * m.block + thread) + k * (m.grid * m.block);
}

// One block per row of an (rows, cols) matrix whose rows lie `stride` elements apart (cross-entropy's logits of a
// padded vocabulary: the columns past cols are not the row's); thread t takes columns t, t + block, ... of its row.
struct RowMap {
  int64_t rows, cols, grid;
  int block;
  int64_t per_thread;
  int64_t stride;
};

inline RowMap row_map(int64_t rows, int64_t cols, int64_t stride) {
  return {rows, cols, rows, kRowBlock, (cols + kRowBlock - 1) / kRowBlock, stride};
}
inline RowMap row_map(int64_t rows, int64_t cols) { return row_map(rows, cols, cols); }

FERRY_HD inline int64_t row_col(const RowMap& m, int thread, int64_t k) { return thread + k * m.block; }
FERRY_HD inline int64_t row_index(const RowMap& m, int64_t row, int thread, int64_t k) {
  return row * m.stride + row_col(m, thread, k);
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
