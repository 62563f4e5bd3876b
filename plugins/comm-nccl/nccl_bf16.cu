// The two conversions of a bf16 sum in fp32 (see nccl_bf16.hpp): grid-stride loops, one
// element per thread per step.
#include <cuda_bf16.h>

#include "nccl_bf16.hpp"

namespace keel_nccl {
namespace {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 4096;  // the grid-stride loop covers the rest

__global__ void widen_kernel(float* out, const __nv_bfloat16* in, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = __bfloat162float(in[i]);
}

__global__ void narrow_kernel(__nv_bfloat16* out, const float* in, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

unsigned blocks_for(size_t n) {
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

}  // namespace

cudaError_t widen_bf16(float* out, const void* in, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  widen_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, static_cast<const __nv_bfloat16*>(in), n);
  return cudaGetLastError();
}

cudaError_t narrow_to_bf16(void* out, const float* in, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  narrow_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(out), in, n);
  return cudaGetLastError();
}

}  // namespace keel_nccl
