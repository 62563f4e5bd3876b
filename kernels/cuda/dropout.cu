// Dropout on the gpu (keel/backend.h dropout_dt, LoRA's adapter dropout): a thread per element
// hashes its (row, column) with the seed, so the mask needs no state and equals the cpu's
// (keel_support/common/dropout_mask.hpp, whose rule this file states again for the device).
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace keel::cuda {
namespace {

__device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

template <typename E>
__global__ void dropout_kernel(E* out, const E* inp, int64_t rows, int64_t cols, int64_t col_offset, uint64_t seed,
                               float p, float scale) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const uint64_t row = uint64_t(i / cols), col = uint64_t(col_offset + i % cols);
  const uint64_t h = splitmix64(seed ^ splitmix64((row << 32) | col));
  const bool keep = float(h >> 40) * (1.0f / 16777216.0f) >= p;
  store(out + i, keep ? load(inp + i) * scale : 0.0f);
}

}  // namespace

void dropout(Elem e, void* out, const void* inp, int64_t rows, int64_t cols, int64_t col_offset, uint64_t seed, float p,
             cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n <= 0) return;
  const float scale = float(1.0 / (1.0 - double(p)));
  const unsigned threads = 256, blocks = unsigned((n + threads - 1) / threads);
  if (e == Elem::bf16)
    dropout_kernel<<<blocks, threads, 0, stream>>>(static_cast<bf16*>(out), static_cast<const bf16*>(inp), rows, cols,
                                                   col_offset, seed, p, scale);
  else
    dropout_kernel<<<blocks, threads, 0, stream>>>(static_cast<float*>(out), static_cast<const float*>(inp), rows,
                                                   cols, col_offset, seed, p, scale);
}

}  // namespace keel::cuda
