// What every .cu file here shares: loading and storing an element of either compute type as
// fp32 (bf16 is storage only: arithmetic is fp32, stores round to nearest even), the launch
// shape of a grid-stride loop, and warp reductions. The reductions use the xor butterfly, so
// every lane ends with the same sum, added in the same order on every run.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

namespace keel::cuda {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float load(const float* p) { return *p; }
__device__ __forceinline__ float load(const bf16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(bf16* p, float v) { *p = __float2bfloat16_rn(v); }

// Eight bf16 at once, one 16-byte access: p must be 16-byte aligned (see in_eights).
__device__ __forceinline__ void load8(float (&v)[8], const bf16* p) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 f = __bfloat1622float2(pairs[k]);
    v[2 * k] = f.x;
    v[2 * k + 1] = f.y;
  }
}
__device__ __forceinline__ void store8(bf16* p, const float (&v)[8]) {
  uint4 raw;
  __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < 4; ++k) pairs[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
  *reinterpret_cast<uint4*>(p) = raw;
}

// Whether rows (or a whole buffer) of n elements at these pointers can be taken eight at a time.
inline bool in_eights(int64_t n, std::initializer_list<const void*> pointers) {
  if (n % 8 != 0) return false;
  for (const void* p : pointers)
    if (p && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sums `v` over a block of kThreads (a multiple of 32) in a fixed tree; every thread gets the sum.
// `scratch` holds kThreads / 32 values; the call begins and ends with a barrier, so it can be reused.
template <int kThreads, typename Acc>
__device__ Acc block_sum(Acc v, Acc* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  Acc total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += scratch[w];  // every thread, the same order
  __syncthreads();
  return total;
}

template <int kThreads>
__device__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = scratch[0];
  for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, scratch[w]);
  __syncthreads();
  return m;
}

constexpr int kThreads = 256;  // the block size of the elementwise kernels

// Blocks for a grid-stride loop over n elements: enough to fill any GPU, never more than needed.
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, int64_t{1} << 16)));
}

#define KEEL_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

}  // namespace keel::cuda
