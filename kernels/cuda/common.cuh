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

// Four fp32 at once, one 16-byte access: p must be 16-byte aligned.
__device__ __forceinline__ void load4(float (&v)[4], const float* p) {
  const float4 f = *reinterpret_cast<const float4*>(p);
  v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
}
__device__ __forceinline__ void store4(float* p, const float (&v)[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
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

// Folds (other_max, other_sum) into (max, sum), each sum being Σ exp(x - its max) over its
// elements (a -inf max: no element above -inf, and a factor exp(-inf) = 0). Rounded products, no
// fused multiply-add: the fold of a into b has the same bits as b into a.
__device__ __forceinline__ void fold_max_sum(float& max, float& sum, float other_max, float other_sum) {
  const float new_max = fmaxf(max, other_max);
  const float shift = new_max == -INFINITY ? 0.0f : new_max;
  sum = __fadd_rn(__fmul_rn(sum, expf(max - shift)), __fmul_rn(other_sum, expf(other_max - shift)));
  max = new_max;
}

// block_max and block_sum at once for a softmax's running (max, Σ exp(x - max)) per thread, in the
// same fixed tree; every thread gets the row's pair. `scratch` holds kThreads / 32 pairs.
template <int kThreads>
__device__ void block_max_sum(float& max, float& sum, float2* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other_max = __shfl_xor_sync(0xffffffffu, max, offset);
    const float other_sum = __shfl_xor_sync(0xffffffffu, sum, offset);
    fold_max_sum(max, sum, other_max, other_sum);
  }
  __syncthreads();
  if (lane == 0) scratch[warp] = make_float2(max, sum);
  __syncthreads();
  max = scratch[0].x, sum = scratch[0].y;
  for (int w = 1; w < kThreads / 32; ++w) fold_max_sum(max, sum, scratch[w].x, scratch[w].y);
  __syncthreads();
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
