// GELU forward/backward, the tanh approximation (GPT-2's), at either compute type, as
// kernels/cpu/gelu.cpp computes it: fp32 arithmetic with tanhf, one element per thread step
// (eight for bf16 buffers that allow it).
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace keel::cuda {
namespace {

constexpr float kGeluScaling = 0.7978845608028654f;  // sqrt(2/π)
constexpr float kCubic = 0.044715f;

__device__ __forceinline__ float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(kGeluScaling * (x + kCubic * x * x * x)));
}

// d gelu / dx = 0.5(1 + tanh u) + 0.5 x (1 - tanh² u) u',  u = s(x + 0.044715 x³)
__device__ __forceinline__ float gelu_grad(float x) {
  const float th = tanhf(kGeluScaling * (x + kCubic * x * x * x));
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kGeluScaling * (1.0f + 3.0f * kCubic * x * x);
}

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  KEEL_GRID_STRIDE(i, n) store(out + i, gelu(load(inp + i)));
}

template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t n) {
  KEEL_GRID_STRIDE(i, n) store(dinp + i, load(dinp + i) + gelu_grad(load(inp + i)) * load(dout + i));
}

// bf16 eight at a time (16-byte accesses), where in_eights holds: the scalar kernels above move
// 2 bytes per thread per instruction and ran at under half the bandwidth on an H200.
__global__ void gelu_forward_x8_kernel(bf16* out, const bf16* inp, int64_t n8) {
  KEEL_GRID_STRIDE(i, n8) {
    float v[8];
    load8(v, inp + 8 * i);
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = gelu(v[k]);
    store8(out + 8 * i, v);
  }
}

__global__ void gelu_backward_x8_kernel(bf16* dinp, const bf16* inp, const bf16* dout, int64_t n8) {
  KEEL_GRID_STRIDE(i, n8) {
    float x[8], g[8], d[8];
    load8(x, inp + 8 * i);
    load8(g, dout + 8 * i);
    load8(d, dinp + 8 * i);
#pragma unroll
    for (int k = 0; k < 8; ++k) d[k] += gelu_grad(x[k]) * g[k];
    store8(dinp + 8 * i, d);
  }
}

}  // namespace

void gelu_forward(Elem e, void* out, const void* inp, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (e == Elem::bf16 && in_eights(n, {out, inp}))
    gelu_forward_x8_kernel<<<grid_for(n / 8), kThreads, 0, stream>>>(static_cast<bf16*>(out),
                                                                     static_cast<const bf16*>(inp), n / 8);
  else if (e == Elem::bf16)
    gelu_forward_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<bf16*>(out), static_cast<const bf16*>(inp),
                                                              n);
  else
    gelu_forward_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<float*>(out), static_cast<const float*>(inp),
                                                              n);
}

void gelu_backward(Elem e, void* dinp, const void* inp, const void* dout, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (e == Elem::bf16 && in_eights(n, {dinp, inp, dout}))
    gelu_backward_x8_kernel<<<grid_for(n / 8), kThreads, 0, stream>>>(
        static_cast<bf16*>(dinp), static_cast<const bf16*>(inp), static_cast<const bf16*>(dout), n / 8);
  else if (e == Elem::bf16)
    gelu_backward_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<bf16*>(dinp), static_cast<const bf16*>(inp),
                                                               static_cast<const bf16*>(dout), n);
  else
    gelu_backward_kernel<<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<float*>(dinp), static_cast<const float*>(inp), static_cast<const float*>(dout), n);
}

}  // namespace keel::cuda
