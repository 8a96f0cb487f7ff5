// Deterministic embedding backward: token ids sorted with their positions (CUB's stable radix sort), one block
// per run of equal ids summing that token's dout rows in position order into dwte; dwpe by position, batch in
// order; the token-type row by chunked column sums. No float atomics: bitwise equal to embedding twin.
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/ops.h"

namespace ferry::kernels::cuda {
namespace {

__global__ void __launch_bounds__(kElementwiseBlock) iota_kernel(ElementwiseMap m, int32_t* pos) {
  for (int64_t k = 0; k < m.per_thread; ++k) {
    const int64_t i = elementwise_index(m, blockIdx.x, static_cast<int>(threadIdx.x), k);
    if (i >= m.n) return;
    pos[i] = static_cast<int32_t>(i);
  }
}

template <class T>
__global__ void __launch_bounds__(kRowBlock) segment_kernel(T* dwte, const T* dout, const int32_t* sorted_tokens,
                                                            const int32_t* sorted_pos, int64_t BT, int64_t C) {
  embedding_segment(dwte, dout, sorted_tokens, sorted_pos, BT, C, blockIdx.x, static_cast<int>(threadIdx.x),
                    static_cast<int>(blockDim.x));
}

template <class T>
__global__ void __launch_bounds__(kElementwiseBlock) position_kernel(ElementwiseMap m, T* dwpe, const T* dout,
                                                                     int64_t B, int64_t T_, int64_t C) {
  for (int64_t k = 0; k < m.per_thread; ++k) {
    const int64_t e = elementwise_index(m, blockIdx.x, static_cast<int>(threadIdx.x), k);
    if (e >= m.n) return;
    embedding_position(dwpe, dout, B, T_, C, e);
  }
}

// The scratch, in order: positions in, tokens and positions sorted (BT int32 each), column partials of the
// type row, the radix sort's temporary; each 256-byte aligned.
struct Scratch {
  int32_t *pos, *sorted_tokens, *sorted_pos;
  float* partials;
  void* sort_temp;
  size_t sort_bytes, total;
  cudaError_t sort_sized;  // CUB's size query: it needs a device (without one, sort_bytes stays 0)
};

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

Scratch scratch_layout(void* base, int64_t BT, int64_t C) {
  Scratch s{};
  s.sort_sized = cub::DeviceRadixSort::SortPairs(nullptr, s.sort_bytes, static_cast<const int32_t*>(nullptr),
                                                 static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                 static_cast<int32_t*>(nullptr), static_cast<int>(BT));
  auto* p = static_cast<char*>(base);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* at = p ? p + off : nullptr;
    off += align256(bytes);
    return at;
  };
  const size_t ints = static_cast<size_t>(BT) * sizeof(int32_t);
  s.pos = reinterpret_cast<int32_t*>(take(ints));
  s.sorted_tokens = reinterpret_cast<int32_t*>(take(ints));
  s.sorted_pos = reinterpret_cast<int32_t*>(take(ints));
  s.partials = reinterpret_cast<float*>(take(column_sums_scratch_bytes(BT, C)));
  s.sort_temp = take(s.sort_bytes);
  s.total = off;
  return s;
}

// Bits of the largest token id, so the radix sort makes only the passes it needs.
int key_bits(int64_t V) {
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) < V) ++bits;
  return bits;
}

}  // namespace

size_t embedding_backward_scratch_bytes(int64_t B, int64_t T, int64_t C) {
  return scratch_layout(nullptr, B * T, C).total;
}

cudaError_t embedding_backward(void* dwte, void* dwpe, void* dtype_row, const void* dout, const int32_t* tokens,
                               int64_t B, int64_t T, int64_t C, int64_t V, void* scratch, DType dtype,
                               cudaStream_t stream) {
  const int64_t BT = B * T;
  // Everything refused before the first launch, so that a refusal leaves the gradients untouched.
  if (dtype == DType::I32 || BT > INT32_MAX || column_map(BT, C).chunks > 65535) return cudaErrorInvalidValue;
  if (BT == 0) return cudaSuccess;
  Scratch s = scratch_layout(scratch, BT, C);
  if (s.sort_sized != cudaSuccess) return s.sort_sized;  // the sort's scratch is unknown: refuse before any launch
  if (dwte) {  // absent when the token embedding is frozen (optim.groups)
    const ElementwiseMap rows = elementwise_map(BT);
    iota_kernel<<<static_cast<unsigned>(rows.grid), rows.block, 0, stream>>>(rows, s.pos);
    const cudaError_t sorted = cub::DeviceRadixSort::SortPairs(s.sort_temp, s.sort_bytes, tokens, s.sorted_tokens,
                                                               s.pos, s.sorted_pos, static_cast<int>(BT), 0,
                                                               key_bits(V), stream);
    if (sorted != cudaSuccess) return sorted;
  }
  const ElementwiseMap pos = elementwise_map(T * C);
  const cudaError_t launch = launched(with_storage(dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* d = static_cast<const S*>(dout);
    if (dwte)
      segment_kernel<S><<<static_cast<unsigned>(BT), kRowBlock, 0, stream>>>(static_cast<S*>(dwte), d, s.sorted_tokens,
                                                                             s.sorted_pos, BT, C);
    if (dwpe)
      position_kernel<S><<<static_cast<unsigned>(pos.grid), pos.block, 0, stream>>>(pos, static_cast<S*>(dwpe), d, B, T, C);
  }));
  if (launch != cudaSuccess || !dtype_row) return launch;
  return column_sums(dtype_row, dout, BT, C, s.partials, dtype, stream);  // every position adds to the one token-type row
}

}  // namespace ferry::kernels::cuda
