// Elementwise ops at either compute type: memory-bound grid-stride loops, one element per
// thread step (eight, in one 16-byte access, for bf16 sums whose buffers allow it: the residual
// adds ran at half the bandwidth with 2-byte accesses), so they are deterministic and
// aliasing-safe (out may be a or b: a thread reads its elements before it writes them).
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace keel::cuda {
namespace {

template <typename T>
__global__ void add_kernel(T* out, const T* a, const T* b, int64_t n) {
  KEEL_GRID_STRIDE(i, n) store(out + i, load(a + i) + load(b + i));
}

__global__ void add8_kernel(bf16* out, const bf16* a, const bf16* b, int64_t groups) {
  KEEL_GRID_STRIDE(g, groups) {
    float x[8], y[8];
    load8(x, a + g * 8);
    load8(y, b + g * 8);
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] += y[k];
    store8(out + g * 8, x);
  }
}

template <typename T>
__global__ void accumulate_kernel(T* dst, const T* src, int64_t n) {
  KEEL_GRID_STRIDE(i, n) store(dst + i, load(dst + i) + load(src + i));
}

template <typename T>
__global__ void scale_kernel(T* x, float alpha, int64_t n) {
  KEEL_GRID_STRIDE(i, n) store(x + i, load(x + i) * alpha);
}

template <typename T>
__global__ void fill_rows_kernel(T* out, const T* bias, int64_t N, int64_t OC) {
  KEEL_GRID_STRIDE(i, N * OC) store(out + i, bias ? load(bias + i % OC) : 0.0f);
}

template <typename Dst, typename Src>
__global__ void convert_kernel(Dst* dst, const Src* src, int64_t n) {
  KEEL_GRID_STRIDE(i, n) store(dst + i, load(src + i));
}

}  // namespace

void add(Elem e, void* out, const void* a, const void* b, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (e == Elem::bf16 && in_eights(n, {out, a, b}))
    add8_kernel<<<grid_for(n / 8), kThreads, 0, stream>>>(static_cast<bf16*>(out), static_cast<const bf16*>(a),
                                                          static_cast<const bf16*>(b), n / 8);
  else if (e == Elem::bf16)
    add_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<bf16*>(out), static_cast<const bf16*>(a),
                                                     static_cast<const bf16*>(b), n);
  else
    add_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<float*>(out), static_cast<const float*>(a),
                                                     static_cast<const float*>(b), n);
}

void accumulate(Elem e, void* dst, const void* src, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (e == Elem::bf16 && in_eights(n, {dst, src}))
    add8_kernel<<<grid_for(n / 8), kThreads, 0, stream>>>(static_cast<bf16*>(dst), static_cast<const bf16*>(dst),
                                                          static_cast<const bf16*>(src), n / 8);
  else if (e == Elem::bf16)
    accumulate_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<bf16*>(dst), static_cast<const bf16*>(src), n);
  else
    accumulate_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<float*>(dst), static_cast<const float*>(src),
                                                            n);
}

void scale(Elem e, void* x, float alpha, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (e == Elem::bf16)
    scale_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<bf16*>(x), alpha, n);
  else
    scale_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<float*>(x), alpha, n);
}

void fill_rows(Elem e, void* out, const void* bias, int64_t N, int64_t OC, cudaStream_t stream) {
  if (N <= 0 || OC <= 0) return;
  if (e == Elem::bf16)
    fill_rows_kernel<<<grid_for(N * OC), kThreads, 0, stream>>>(static_cast<bf16*>(out), static_cast<const bf16*>(bias),
                                                                N, OC);
  else
    fill_rows_kernel<<<grid_for(N * OC), kThreads, 0, stream>>>(static_cast<float*>(out),
                                                                static_cast<const float*>(bias), N, OC);
}

void convert(Elem dst_elem, void* dst, Elem src_elem, const void* src, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (dst_elem == src_elem) {
    const size_t bytes = static_cast<size_t>(n) * (dst_elem == Elem::bf16 ? sizeof(bf16) : sizeof(float));
    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
  } else if (dst_elem == Elem::bf16) {
    convert_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<bf16*>(dst), static_cast<const float*>(src), n);
  } else {
    convert_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<float*>(dst), static_cast<const bf16*>(src), n);
  }
}

}  // namespace keel::cuda
