// LayerNorm forward/backward at either compute type, and RMSNorm's backward, which is LayerNorm's
// with a NULL mean (no centring). One warp per row (lanes stride over the
// channels, sums by warp butterfly); the forward takes the variance of the centred row in a
// second pass, as kernels/cpu does. dweight and dbias sum over rows, which would take atomics
// if rows wrote them; instead blocks sum fixed chunks of rows into scratch and a last kernel
// adds the chunks in order, so the sums come out the same on every run.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace keel::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // warps per block in the per-row kernels
constexpr float kEps = 1e-5f;

template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias,
                                         int64_t N, int64_t C) {
  const int64_t n = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= N) return;
  const T* x = inp + n * C;
  float sum = 0.0f;
  for (int64_t i = lane; i < C; i += 32) sum += load(x + i);
  const float m = warp_sum(sum) / C;
  float sq = 0.0f;
  for (int64_t i = lane; i < C; i += 32) {
    const float d = load(x + i) - m;
    sq += d * d;
  }
  const float s = rsqrtf(warp_sum(sq) / C + kEps);
  T* y = out + n * C;
  for (int64_t i = lane; i < C; i += 32) store(y + i, (load(x + i) - m) * s * load(weight + i) + load(bias + i));
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = s;
  }
}

// dinp = s * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = weight * dout
template <typename T>
__global__ void layernorm_backward_inp_kernel(T* dinp, const T* dout, const T* inp, const T* weight, const float* mean,
                                              const float* rstd, int64_t N, int64_t C) {
  const int64_t n = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= N) return;
  const T* x = inp + n * C;
  const T* g = dout + n * C;
  const float m = mean ? mean[n] : 0.0f, s = rstd[n];
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (int64_t i = lane; i < C; i += 32) {
    const float dnorm = load(weight + i) * load(g + i);
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * (load(x + i) - m) * s;
  }
  const float dnorm_mean = mean ? warp_sum(dnorm_sum) / C : 0.0f;  // RMSNorm does not centre
  const float dnorm_norm_mean = warp_sum(dnorm_norm_sum) / C;
  T* dx = dinp + n * C;
  for (int64_t i = lane; i < C; i += 32) {
    const float norm = (load(x + i) - m) * s;
    store(dx + i, load(dx + i) + s * (load(weight + i) * load(g + i) - dnorm_mean - norm * dnorm_norm_mean));
  }
}

// dweight and dbias in two passes, so that many blocks share the rows without atomics. Pass 1:
// block (32, kRowGroups) at (column block x, chunk y) sums kChunkRows rows of 32 columns, thread
// row r taking rows r, r + kRowGroups, ..., and writes the chunk's sums to scratch in a fixed
// order. Pass 2: a thread per column adds the chunks in order. The chunk is a constant, not a
// function of the device, so the sums come out the same on every run and GPU.
constexpr int kRowGroups = 16;
constexpr int64_t kChunkRows = 256;

__host__ __device__ inline int64_t chunks_of_rows(int64_t N) { return (N + kChunkRows - 1) / kChunkRows; }
int64_t chunks_of(int64_t N) { return chunks_of_rows(N); }

template <typename T>
__global__ void layernorm_params_partial_kernel(float* partial_w, float* partial_b, const T* dout, const T* inp,
                                                const float* mean, const float* rstd, int64_t N, int64_t C) {
  __shared__ float sum_w[kRowGroups][33];
  __shared__ float sum_b[kRowGroups][33];
  const int64_t i = blockIdx.x * int64_t(32) + threadIdx.x;
  for (int64_t chunk = blockIdx.y; chunk < chunks_of_rows(N); chunk += gridDim.y) {  // past 65535 chunks
    const int64_t first = chunk * kChunkRows, end = first + kChunkRows < N ? first + kChunkRows : N;
    float w = 0.0f, b = 0.0f;
    if (i < C) {
      for (int64_t n = first + threadIdx.y; n < end; n += kRowGroups) {
        const float g = load(dout + n * C + i);
        b += g;
        w += (load(inp + n * C + i) - (mean ? mean[n] : 0.0f)) * rstd[n] * g;
      }
    }
    sum_w[threadIdx.y][threadIdx.x] = w;
    sum_b[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y == 0 && i < C) {
      float w_sum = 0.0f, b_sum = 0.0f;
      for (int r = 0; r < kRowGroups; ++r) {
        w_sum += sum_w[r][threadIdx.x];
        b_sum += sum_b[r][threadIdx.x];
      }
      partial_w[chunk * C + i] = w_sum;
      partial_b[chunk * C + i] = b_sum;
    }
    __syncthreads();  // sum_w and sum_b are read before the next chunk writes them
  }
}

__global__ void layernorm_params_total_kernel(float* dweight, float* dbias, const float* partial_w,
                                              const float* partial_b, int64_t chunks, int64_t C) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= C) return;
  float w = 0.0f, b = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) {
    w += partial_w[k * C + i];
    b += partial_b[k * C + i];
  }
  if (dweight) dweight[i] += w;
  if (dbias) dbias[i] += b;
}

// bf16 rows taken 8 elements (16 bytes) at a time (load8, store8), where C % 8 == 0 and every
// row pointer is 16-byte aligned: one load instruction where the kernels above issue eight, which
// is what bounded them (measured on an H200: 3.6 ms a call at GPT-2's N = 131072, C = 768).
__global__ void layernorm_backward_inp_x8_kernel(bf16* dinp, const bf16* dout, const bf16* inp, const bf16* weight,
                                                 const float* mean, const float* rstd, int64_t N, int64_t C) {
  const int64_t n = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= N) return;
  const bf16* x = inp + n * C;
  const bf16* g = dout + n * C;
  const float m = mean ? mean[n] : 0.0f, s = rstd[n];
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (int64_t i = lane * 8; i < C; i += 32 * 8) {
    float w[8], gi[8], xi[8];
    load8(w, weight + i);
    load8(gi, g + i);
    load8(xi, x + i);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float dnorm = w[k] * gi[k];
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * (xi[k] - m) * s;
    }
  }
  const float dnorm_mean = mean ? warp_sum(dnorm_sum) / C : 0.0f;  // RMSNorm does not centre
  const float dnorm_norm_mean = warp_sum(dnorm_norm_sum) / C;
  bf16* dx = dinp + n * C;
  for (int64_t i = lane * 8; i < C; i += 32 * 8) {
    float w[8], gi[8], xi[8], d[8];
    load8(w, weight + i);
    load8(gi, g + i);
    load8(xi, x + i);
    load8(d, dx + i);
#pragma unroll
    for (int k = 0; k < 8; ++k) d[k] += s * (w[k] * gi[k] - dnorm_mean - (xi[k] - m) * s * dnorm_norm_mean);
    store8(dx + i, d);
  }
}

// Pass 1 of the parameter gradients as layernorm_params_partial_kernel, each thread taking 8
// adjacent columns, a block 256.
__global__ void layernorm_params_partial_x8_kernel(float* partial_w, float* partial_b, const bf16* dout,
                                                   const bf16* inp, const float* mean, const float* rstd, int64_t N,
                                                   int64_t C) {
  __shared__ float sum_w[kRowGroups][32 * 8];
  __shared__ float sum_b[kRowGroups][32 * 8];
  const int64_t col = (blockIdx.x * int64_t(32) + threadIdx.x) * 8;
  for (int64_t chunk = blockIdx.y; chunk < chunks_of_rows(N); chunk += gridDim.y) {  // past 65535 chunks
    const int64_t first = chunk * kChunkRows, end = first + kChunkRows < N ? first + kChunkRows : N;
    float w[8] = {}, b[8] = {};
    if (col < C) {
      for (int64_t n = first + threadIdx.y; n < end; n += kRowGroups) {
        float gi[8], xi[8];
        load8(gi, dout + n * C + col);
        load8(xi, inp + n * C + col);
        const float m = mean ? mean[n] : 0.0f, s = rstd[n];
  #pragma unroll
        for (int k = 0; k < 8; ++k) {
          b[k] += gi[k];
          w[k] += (xi[k] - m) * s * gi[k];
        }
      }
    }
  #pragma unroll
    for (int k = 0; k < 8; ++k) {
      sum_w[threadIdx.y][threadIdx.x * 8 + k] = w[k];
      sum_b[threadIdx.y][threadIdx.x * 8 + k] = b[k];
    }
    __syncthreads();
    if (threadIdx.y == 0 && col < C) {
  #pragma unroll
      for (int k = 0; k < 8; ++k) {
        float w_sum = 0.0f, b_sum = 0.0f;
        for (int r = 0; r < kRowGroups; ++r) {
          w_sum += sum_w[r][threadIdx.x * 8 + k];
          b_sum += sum_b[r][threadIdx.x * 8 + k];
        }
        partial_w[chunk * C + col + k] = w_sum;
        partial_b[chunk * C + col + k] = b_sum;
      }
    }
    __syncthreads();  // sum_w and sum_b are read before the next chunk writes them
  }
}

// The two passes for the weight (and bias) gradient of a norm: LayerNorm's with its mean, RMSNorm's
// with mean NULL (x̂ = x·rstd, and no bias).
template <typename T>
void norm_params_backward_typed(float* dweight, float* dbias, const T* dout, const T* inp, const float* mean,
                                const float* rstd, int64_t N, int64_t C, bool x8, float* scratch, cudaStream_t stream) {
  constexpr bool kBf16 = std::is_same_v<T, bf16>;
  if (dweight || dbias) {
    const int64_t chunks = chunks_of(N);
    float* partial_w = scratch;
    float* partial_b = scratch + chunks * C;
    if constexpr (kBf16)
      if (x8) {
        const dim3 grid(static_cast<unsigned>((C + 255) / 256), static_cast<unsigned>(std::min<int64_t>(chunks, 65535)));
        layernorm_params_partial_x8_kernel<<<grid, dim3(32, kRowGroups), 0, stream>>>(partial_w, partial_b, dout, inp,
                                                                                      mean, rstd, N, C);
      }
    if (!x8) {
      const dim3 grid(static_cast<unsigned>((C + 31) / 32), static_cast<unsigned>(std::min<int64_t>(chunks, 65535)));
      layernorm_params_partial_kernel<<<grid, dim3(32, kRowGroups), 0, stream>>>(partial_w, partial_b, dout, inp, mean,
                                                                                 rstd, N, C);
    }
    layernorm_params_total_kernel<<<static_cast<unsigned>((C + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        dweight, dbias, partial_w, partial_b, chunks, C);
  }
}

template <typename T>
void layernorm_backward_typed(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp, const T* weight,
                              const float* mean, const float* rstd, int64_t N, int64_t C, float* scratch,
                              cudaStream_t stream) {
  constexpr bool kBf16 = std::is_same_v<T, bf16>;
  const bool x8 = kBf16 && in_eights(C, {dinp, dout, inp, weight});
  if (dinp) {
    const unsigned blocks = static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
    if constexpr (kBf16)
      if (x8) {
        layernorm_backward_inp_x8_kernel<<<blocks, 32 * kRowsPerBlock, 0, stream>>>(dinp, dout, inp, weight, mean, rstd,
                                                                                    N, C);
      }
    if (!x8)
      layernorm_backward_inp_kernel<<<blocks, 32 * kRowsPerBlock, 0, stream>>>(dinp, dout, inp, weight, mean, rstd, N,
                                                                               C);
  }
  norm_params_backward_typed(dweight, dbias, dout, inp, mean, rstd, N, C, x8, scratch, stream);
}



}  // namespace

void layernorm_forward(Elem e, void* out, float* mean, float* rstd, const void* inp, const void* weight,
                       const void* bias, int64_t N, int64_t C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  const unsigned blocks = static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
  if (e == Elem::bf16)
    layernorm_forward_kernel<<<blocks, 32 * kRowsPerBlock, 0, stream>>>(
        static_cast<bf16*>(out), mean, rstd, static_cast<const bf16*>(inp), static_cast<const bf16*>(weight),
        static_cast<const bf16*>(bias), N, C);
  else
    layernorm_forward_kernel<<<blocks, 32 * kRowsPerBlock, 0, stream>>>(
        static_cast<float*>(out), mean, rstd, static_cast<const float*>(inp), static_cast<const float*>(weight),
        static_cast<const float*>(bias), N, C);
}

int64_t layernorm_backward_scratch_floats(int64_t N, int64_t C) { return N > 0 && C > 0 ? 2 * chunks_of(N) * C : 0; }

void layernorm_backward(Elem e, void* dinp, float* dweight, float* dbias, const void* dout, const void* inp,
                        const void* weight, const float* mean, const float* rstd, int64_t N, int64_t C, float* scratch,
                        cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  if (e == Elem::bf16)
    layernorm_backward_typed(static_cast<bf16*>(dinp), dweight, dbias, static_cast<const bf16*>(dout),
                             static_cast<const bf16*>(inp), static_cast<const bf16*>(weight), mean, rstd, N, C,
                             scratch, stream);
  else
    layernorm_backward_typed(static_cast<float*>(dinp), dweight, dbias, static_cast<const float*>(dout),
                             static_cast<const float*>(inp), static_cast<const float*>(weight), mean, rstd, N, C,
                             scratch, stream);
}

// RMSNorm's backward is LayerNorm's with no mean: x̂ = x·rstd, no centring term, no bias.
void rmsnorm_backward(Elem e, void* dinp, float* dweight, const void* dout, const void* inp, const void* weight,
                      const float* rstd, int64_t N, int64_t C, float* scratch, cudaStream_t stream) {
  layernorm_backward(e, dinp, dweight, nullptr, dout, inp, weight, nullptr, rstd, N, C, scratch, stream);
}

}  // namespace keel::cuda
