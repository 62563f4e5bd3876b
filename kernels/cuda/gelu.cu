// GELU forward/backward, the tanh approximation (GPT-2's), at either compute type, as
// kernels/cpu/gelu.cpp computes it: fp32 arithmetic with tanhf, one element per thread step.
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

}  // namespace

void gelu_forward(Elem e, void* out, const void* inp, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (e == Elem::bf16)
    gelu_forward_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<bf16*>(out), static_cast<const bf16*>(inp),
                                                              n);
  else
    gelu_forward_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<float*>(out), static_cast<const float*>(inp),
                                                              n);
}

void gelu_backward(Elem e, void* dinp, const void* inp, const void* dout, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (e == Elem::bf16)
    gelu_backward_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<bf16*>(dinp), static_cast<const bf16*>(inp),
                                                               static_cast<const bf16*>(dout), n);
  else
    gelu_backward_kernel<<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<float*>(dinp), static_cast<const float*>(inp), static_cast<const float*>(dout), n);
}

}  // namespace keel::cuda
