// The tiling shared by attention_forward.cu and attention_backward.cu: a block holds kWarps
// rows (one warp each) and walks the other side of the score matrix in tiles of kTile rows kept
// in shared memory as fp32, padded to hs + 1 floats so lane j reading row j meets no bank
// conflict. kTile is 32 so that lane j owns row j of the tile.
#pragma once

#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace keel::cuda {

constexpr int kTile = 32;
constexpr int kWarps = 8;
constexpr int kPerLane = static_cast<int>(kAttentionMaxHeadSize / 32);  // channels per lane

// tile[j][d] = src[(row0 + j) * stride + d] for rows < T (zeros past the end), by the whole block.
template <typename E>
__device__ void load_rows(float* tile, int ld, const E* src, int64_t stride, int64_t row0, int64_t T, int hs) {
  for (int idx = threadIdx.x; idx < kTile * hs; idx += blockDim.x) {
    const int j = idx / hs, d = idx % hs;
    const int64_t row = row0 + j;
    tile[j * ld + d] = row < T ? load(src + row * stride + d) : 0.0f;
  }
}

__device__ __forceinline__ float dot_row(const float* a, const float* b, int hs) {
  float sum = 0.0f;
  for (int d = 0; d < hs; ++d) sum += a[d] * b[d];
  return sum;
}

}  // namespace keel::cuda
