// NF4 dequantization (QLoRA's frozen base) on the gpu: a thread per weight, its block's absmax
// from the double-quantized scales, the table passed by value from keel_support/common/nf4.hpp
// (the one definition of the values; the kernels include no plugin-SDK header).
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace keel::cuda {
namespace {

template <typename E>
__global__ void nf4_dequantize_kernel(E* out, const uint8_t* codes, const int8_t* block_scales,
                                      const float* scale_factors, float scale_mean, Nf4Table table, int64_t n) {
  KEEL_GRID_STRIDE(i, n) {
    const uint8_t byte = codes[i / 2];  // the last block may be partial: i stays below n
    const int code = i % 2 == 0 ? byte >> 4 : byte & 15;
    const int64_t b = i / 64;
    const float absmax = float(block_scales[b]) * scale_factors[b / 256] + scale_mean;
    store(out + i, table.values[code] * absmax);
  }
}

}  // namespace

void nf4_dequantize(Elem e, void* out, const uint8_t* codes, const int8_t* block_scales, const float* scale_factors,
                    float scale_mean, const Nf4Table& table, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (e == Elem::bf16)
    nf4_dequantize_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<bf16*>(out), codes, block_scales,
                                                                scale_factors, scale_mean, table, n);
  else
    nf4_dequantize_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<float*>(out), codes, block_scales,
                                                                scale_factors, scale_mean, table, n);
}

}  // namespace keel::cuda
