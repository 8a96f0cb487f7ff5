// The one reduction order of every CUDA row/reduction kernel, and its host replay. A block of `block`
// threads (a multiple of 32, at most 1024): each thread folds its elements in index order (lane split:
// c = t, t + block, ...), each warp combines its 32 lanes by an xor butterfly (offsets 16, 8, 4, 2, 1: lane l
// takes merge(own, lane l^off)), lane 0 of each warp hands its value to warp level, and every warp then
// runs the same butterfly over the warp values (lanes beyond the warp count hold the empty state) and takes
// lane 0. The merges need not be commutative: the replay follows each lane.
#pragma once

#include <cstdint>

namespace ferry::kernels::cuda {

constexpr int kWarp = 32;

// lanes[32] -> lane 0 after the butterfly (the host twin of the device warp_tree).
template <class S, class Merge>
S warp_tree_twin(const S* lanes, Merge merge) {
  S cur[kWarp], next[kWarp];
  for (int l = 0; l < kWarp; ++l) cur[l] = lanes[l];
  for (int off = kWarp / 2; off >= 1; off /= 2) {
    for (int l = 0; l < kWarp; ++l) next[l] = merge(cur[l], cur[l ^ off]);
    for (int l = 0; l < kWarp; ++l) cur[l] = next[l];
  }
  return cur[0];
}

// partial[block]: each thread's folded state -> the block's result, as every thread of the kernel sees it.
template <class S, class Merge>
S block_reduce_twin(const S* partial, int block, S empty, Merge merge) {
  const int warps = block / kWarp;
  S lanes[kWarp];
  for (int l = 0; l < kWarp; ++l) lanes[l] = empty;
  for (int w = 0; w < warps; ++w) lanes[w] = warp_tree_twin(partial + w * kWarp, merge);
  return warp_tree_twin(lanes, merge);
}

}  // namespace ferry::kernels::cuda
