// The Llama family's elementwise and row ops at either compute type, as kernels/cpu computes
// them: RMSNorm's forward (a warp per row; its backward is LayerNorm's without a mean, in
// layernorm.cu), rotary position embedding in place (an element pair per
// thread, the angle position · inv_freq formed in fp32 and its cosine and sine taken in double,
// as the cpu kernel does), and SwiGLU over side-by-side gate and up columns (σ in the form that
// never overflows). Grouped-query attention is attention_forward.cu / attention_backward.cu.
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace keel::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // warps per block in the per-row kernels

template <typename T>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C,
                                       float eps) {
  const int64_t n = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= N) return;
  const T* x = inp + n * C;
  float sq = 0.0f;
  for (int64_t i = lane; i < C; i += 32) {
    const float v = load(x + i);
    sq += v * v;
  }
  const float s = 1.0f / sqrtf(warp_sum(sq) / C + eps);
  T* y = out + n * C;
  for (int64_t i = lane; i < C; i += 32) store(y + i, (load(x + i) * s) * load(weight + i));
  if (lane == 0) rstd[n] = s;
}

// One thread per (row, head, pair i): a' = a cos − b sin, b' = b cos + a sin, sin × direction.
template <typename T>
__global__ void rope_kernel(T* x, const float* inv_freq, int64_t rows, int64_t T_len, int64_t heads, int64_t half,
                            int64_t stride, int64_t first, int64_t position0, const int32_t* positions,
                            float direction) {
  KEEL_GRID_STRIDE(idx, rows * heads * half) {
    const int64_t i = idx % half, h = (idx / half) % heads, row = idx / (half * heads);
    const float position = static_cast<float>(positions ? int64_t(positions[row]) : position0 + row % T_len);
    const double angle = static_cast<double>(position * inv_freq[i]);
    const float c = static_cast<float>(cos(angle)), s = direction * static_cast<float>(sin(angle));
    T* a = x + row * stride + first + h * 2 * half + i;
    T* b = a + half;
    const float ai = load(a), bi = load(b);
    store(a, ai * c - bi * s);
    store(b, bi * c + ai * s);
  }
}

__device__ __forceinline__ float sigmoid(float g) {
  if (g >= 0.0f) return 1.0f / (1.0f + expf(-g));
  const float e = expf(g);
  return e / (1.0f + e);
}

template <typename T>
__global__ void swiglu_forward_kernel(T* out, const T* gate_up, int64_t N, int64_t F) {
  KEEL_GRID_STRIDE(idx, N * F) {
    const int64_t n = idx / F, i = idx % F;
    const float g = load(gate_up + n * 2 * F + i), u = load(gate_up + n * 2 * F + F + i);
    store(out + idx, g * sigmoid(g) * u);
  }
}

// SwiGLU eight columns at a time, each access 16 bytes, where F % 8 == 0 and the rows are
// 16-byte aligned: the element-wise kernels above ran at a third of the bandwidth at Llama 1B's
// N = 16384, F = 8192. The arithmetic is theirs, element for element.
__global__ void swiglu_forward_x8_kernel(bf16* out, const bf16* gate_up, int64_t N, int64_t F) {
  const int64_t groups = F / 8;
  KEEL_GRID_STRIDE(idx, N * groups) {
    const int64_t n = idx / groups, i = (idx % groups) * 8;
    float g[8], u[8], o[8];
    load8(g, gate_up + n * 2 * F + i);
    load8(u, gate_up + n * 2 * F + F + i);
#pragma unroll
    for (int k = 0; k < 8; ++k) o[k] = g[k] * sigmoid(g[k]) * u[k];
    store8(out + n * F + i, o);
  }
}

__global__ void swiglu_backward_x8_kernel(bf16* dgate_up, const bf16* dout, const bf16* gate_up, int64_t N, int64_t F) {
  const int64_t groups = F / 8;
  KEEL_GRID_STRIDE(idx, N * groups) {
    const int64_t n = idx / groups, i = (idx % groups) * 8;
    float g[8], u[8], d[8], dg[8], du[8];
    load8(g, gate_up + n * 2 * F + i);
    load8(u, gate_up + n * 2 * F + F + i);
    load8(d, dout + n * F + i);
    bf16* dgate = dgate_up + n * 2 * F + i;
    load8(dg, dgate);
    load8(du, dgate + F);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float s = sigmoid(g[k]);
      du[k] += d[k] * (g[k] * s);
      dg[k] += d[k] * u[k] * s * (1.0f + g[k] * (1.0f - s));
    }
    store8(dgate + F, du);
    store8(dgate, dg);
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(T* dgate_up, const T* dout, const T* gate_up, int64_t N, int64_t F) {
  KEEL_GRID_STRIDE(idx, N * F) {
    const int64_t n = idx / F, i = idx % F;
    const float g = load(gate_up + n * 2 * F + i), u = load(gate_up + n * 2 * F + F + i), d = load(dout + idx);
    const float s = sigmoid(g);
    T* dgate = dgate_up + n * 2 * F + i;
    T* dup = dgate + F;
    store(dup, load(dup) + d * (g * s));
    // silu'(x) = σ(x) (1 + x (1 − σ(x)))
    store(dgate, load(dgate) + d * u * s * (1.0f + g * (1.0f - s)));
  }
}

}  // namespace

void rmsnorm_forward(Elem e, void* out, float* rstd, const void* inp, const void* weight, int64_t N, int64_t C,
                     float eps, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  const unsigned blocks = static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
  if (e == Elem::bf16)
    rmsnorm_forward_kernel<<<blocks, 32 * kRowsPerBlock, 0, stream>>>(
        static_cast<bf16*>(out), rstd, static_cast<const bf16*>(inp), static_cast<const bf16*>(weight), N, C, eps);
  else
    rmsnorm_forward_kernel<<<blocks, 32 * kRowsPerBlock, 0, stream>>>(
        static_cast<float*>(out), rstd, static_cast<const float*>(inp), static_cast<const float*>(weight), N, C, eps);
}

void rope(Elem e, void* x, const float* inv_freq, int64_t B, int64_t T, int64_t heads, int64_t head_dim, int64_t stride,
          int64_t first, int64_t position0, bool backward, cudaStream_t stream, const int32_t* positions) {
  const int64_t half = head_dim / 2, n = B * T * heads * half;
  if (n <= 0) return;
  const float direction = backward ? -1.0f : 1.0f;
  if (e == Elem::bf16)
    rope_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<bf16*>(x), inv_freq, B * T, T, heads, half, stride,
                                                      first, position0, positions, direction);
  else
    rope_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<float*>(x), inv_freq, B * T, T, heads, half, stride,
                                                      first, position0, positions, direction);
}

void swiglu_forward(Elem e, void* out, const void* gate_up, int64_t N, int64_t F, cudaStream_t stream) {
  if (N * F <= 0) return;
  if (e == Elem::bf16 && in_eights(F, {out, gate_up}))
    swiglu_forward_x8_kernel<<<grid_for(N * F / 8), kThreads, 0, stream>>>(
        static_cast<bf16*>(out), static_cast<const bf16*>(gate_up), N, F);
  else if (e == Elem::bf16)
    swiglu_forward_kernel<<<grid_for(N * F), kThreads, 0, stream>>>(static_cast<bf16*>(out),
                                                                    static_cast<const bf16*>(gate_up), N, F);
  else
    swiglu_forward_kernel<<<grid_for(N * F), kThreads, 0, stream>>>(static_cast<float*>(out),
                                                                    static_cast<const float*>(gate_up), N, F);
}

void swiglu_backward(Elem e, void* dgate_up, const void* dout, const void* gate_up, int64_t N, int64_t F,
                     cudaStream_t stream) {
  if (N * F <= 0) return;
  if (e == Elem::bf16 && in_eights(F, {dgate_up, dout, gate_up}))
    swiglu_backward_x8_kernel<<<grid_for(N * F / 8), kThreads, 0, stream>>>(
        static_cast<bf16*>(dgate_up), static_cast<const bf16*>(dout), static_cast<const bf16*>(gate_up), N, F);
  else if (e == Elem::bf16)
    swiglu_backward_kernel<<<grid_for(N * F), kThreads, 0, stream>>>(
        static_cast<bf16*>(dgate_up), static_cast<const bf16*>(dout), static_cast<const bf16*>(gate_up), N, F);
  else
    swiglu_backward_kernel<<<grid_for(N * F), kThreads, 0, stream>>>(
        static_cast<float*>(dgate_up), static_cast<const float*>(dout), static_cast<const float*>(gate_up), N, F);
}

}  // namespace keel::cuda
