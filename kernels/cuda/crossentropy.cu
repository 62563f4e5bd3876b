// Cross-entropy over the vocabulary without a probability array (0.8): per row, statistics of
// its logits (max, Σ exp(x - max), the target's logit), combined over vocabulary shards into a
// log-sum-exp and the loss, then the gradient exp(x - lse) - onehot written or added in one pass.
// Also 0.1's fp32 pair that does keep probabilities. A block per row; every sum is a fixed tree
// (common.cuh), and the loss over rows is summed by one block in a fixed order: no atomics.
//
// Speed: stats and backward stream the logits, so bytes set the floor. GPT-2 124M in bf16, N =
// 131072 rows of cols = 50304 (100.6 KB a row): stats reads 13.2 GB, once (a running max, its sum
// rescaled when the max grows); the in-place backward reads and writes it, 26.4 GB. At ~4.0 TB/s
// (an H200 streaming, 4.8 peak) that is 3.3 ms and 6.6 ms; on an H100 (~3.0 of 3.35 TB/s) 4.4 and
// 8.8 ms. Expected within ~10% of those (they took 7.5 and 20.6 ms on an H200 as a max pass then a
// sum pass of 2-byte loads, and a 2-byte backward). What keeps the bytes coming: 16-byte loads (8
// bf16, 4 fp32), kChunksInFlight of them issued before the first is used, by 256-thread blocks of
// which 4-6 fit an SM (39-63 registers): 64-96 KB in flight per SM, where ~4 TB/s at ~1 us of
// latency asks ~30 KB of each of 132 SMs. A bigger block or more rows per block would add nothing
// to that (it is resident threads times loads each), and a 100 KB row gives each thread 25 chunks.
// The other limit is issue: 132 SMs x 128 lanes x ~1.75 GHz is ~15 instructions per bf16 element at
// 4 TB/s. The stats loop takes ~8 (with expf it took ~14, hence the ex2 unit below), the backward
// ~14 of the ~30 its 4 bytes an element leave, with expf.
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace keel::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kChunksInFlight = 4;  // 16-byte loads a thread issues before it uses the first

template <typename E>
constexpr int kChunk = 16 / static_cast<int>(sizeof(E));  // elements in one 16-byte access

__device__ __forceinline__ void load_chunk(float (&v)[8], const bf16* p) { load8(v, p); }
__device__ __forceinline__ void load_chunk(float (&v)[4], const float* p) { load4(v, p); }
__device__ __forceinline__ void store_chunk(bf16* p, const float (&v)[8]) { store8(p, v); }
__device__ __forceinline__ void store_chunk(float* p, const float (&v)[4]) { store4(p, v); }

// The first `count` elements at p one at a time, -inf past them (a column that adds nothing).
template <typename E, int K>
__device__ __forceinline__ void load_elements(float (&v)[K], const E* p, int64_t count) {
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = k < count ? load(p + k) : -INFINITY;
}

// Whether every row of `cols` elements at p starts on 16 bytes, so that it reads in whole chunks.
bool rows_in_chunks(int64_t cols, size_t elem_bytes, const void* p) {
  return (cols * static_cast<int64_t>(elem_bytes)) % 16 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

__device__ __forceinline__ bool owns_target(int32_t target, int64_t col_begin, int64_t valid_cols) {
  const int64_t local = static_cast<int64_t>(target) - col_begin;
  return target >= 0 && local >= 0 && local < valid_cols;
}

// One thread's running statistics: the max of the logits it has seen, and Σ exp(x - shift) over
// them, where shift is that max once it is above -inf (0 before: exp(-inf - 0) adds 0).
struct RunningSum {
  float max = -INFINITY;
  float shift = 0.0f;
  float sum = 0.0f;
};

// e^d for d = x - max <= 0 of one logit. fp32 logits: expf. bf16 logits: __expf's computation (d ·
// log2e into the ex2 unit; 2 + 1.173·|d| ulp against expf's 2) with results under 2^-126 flushed
// to 0 (terms 1e-38 of a sum >= 1). expf's range reduction would spend 8 of the ~14 instructions
// per element that the bandwidth leaves (see the top), and a row's sum moves by at most
// (2 + 1.173·Σ p·|d|) ulp, where Σ p·|d| = max - E_p[x] <= the softmax's entropy <= ln(valid_cols):
// 15 ulp (1.8e-6) for GPT-2's 50257 columns, within what the order of the fp32 additions moves it.
template <typename E>
__device__ __forceinline__ float exp_of_shifted(float d);
template <>
__device__ __forceinline__ float exp_of_shifted<float>(float d) {
  return expf(d);
}
template <>
__device__ __forceinline__ float exp_of_shifted<bf16>(float d) {
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(d * 1.44269504088896341f));
  return e;
}

// Folds one chunk in: its max first, the sum rescaled only when the max grows (a few times a row),
// then one exp per element, summed in pairs.
template <typename E, int K>
__device__ __forceinline__ void add_chunk(RunningSum& r, const float (&v)[K]) {
  float chunk_max = v[0];
#pragma unroll
  for (int k = 1; k < K; ++k) chunk_max = fmaxf(chunk_max, v[k]);
  if (chunk_max > r.max) {  // from the old max, not the shift: a -inf max scales by exp(-inf) = 0
    r.sum = __fmul_rn(r.sum, expf(r.max - chunk_max));
    r.max = r.shift = chunk_max;
  }
  float e[K];
#pragma unroll
  for (int k = 0; k < K; ++k) e[k] = exp_of_shifted<E>(v[k] - r.shift);
#pragma unroll
  for (int width = 1; width < K; width *= 2)
#pragma unroll
    for (int k = 0; k + width < K; k += 2 * width) e[k] = __fadd_rn(e[k], e[k + width]);
  r.sum = __fadd_rn(r.sum, e[0]);
}

// Thread t takes chunks t, t + kRowThreads, ... of the row's valid columns, in that order, then the
// chunk that ends mid-way if it falls to t; the block folds the threads' pairs in a fixed tree.
// kWholeChunks reads each chunk with one 16-byte load, otherwise element by element: the same
// values in the same order, so the same bits either way.
template <typename E, bool kWholeChunks>
__global__ void __launch_bounds__(kRowThreads)
    crossentropy_stats_kernel(float* stats, const E* logits, const int32_t* targets, int64_t col_begin,
                              int64_t valid_cols, int64_t cols) {
  constexpr int K = kChunk<E>;
  __shared__ float2 scratch[kRowThreads / 32];
  const int64_t n = blockIdx.x;
  const E* x = logits + n * cols;
  const int64_t whole_chunks = valid_cols / K;
  RunningSum r;
  int64_t c = threadIdx.x;
  if constexpr (kWholeChunks) {
    for (; c + (kChunksInFlight - 1) * kRowThreads < whole_chunks; c += kChunksInFlight * kRowThreads) {
      float v[kChunksInFlight][K];
#pragma unroll
      for (int u = 0; u < kChunksInFlight; ++u) load_chunk(v[u], x + (c + u * kRowThreads) * K);
#pragma unroll
      for (int u = 0; u < kChunksInFlight; ++u) add_chunk<E>(r, v[u]);
    }
  }
  for (; c < whole_chunks; c += kRowThreads) {
    float v[K];
    if constexpr (kWholeChunks)
      load_chunk(v, x + c * K);
    else
      load_elements(v, x + c * K, K);
    add_chunk<E>(r, v);
  }
  if (c == whole_chunks && c * K < valid_cols) {
    float v[K];
    load_elements(v, x + c * K, valid_cols - c * K);
    add_chunk<E>(r, v);
  }
  block_max_sum<kRowThreads>(r.max, r.sum, scratch);
  if (threadIdx.x == 0) {
    const int32_t target = targets[n];
    stats[n * 3 + 0] = r.max;
    stats[n * 3 + 1] = r.max == -INFINITY ? 0.0f : r.sum;
    stats[n * 3 + 2] = owns_target(target, col_begin, valid_cols) ? load(x + (target - col_begin)) : 0.0f;
  }
}

// One block: thread k takes rows k, k + kCombineThreads, ... in order; then a fixed tree. In
// double, as kernels/cpu/vocab_shard.cpp combines: it is N rows of a few shards, once a step.
constexpr int kCombineThreads = 1024;

__global__ void crossentropy_combine_kernel(float* lse, float* loss_sum, const float* stats, int32_t n_shards,
                                            const int32_t* targets, int64_t N, float weight) {
  __shared__ double scratch[kCombineThreads / 32];
  double loss = 0.0;
  for (int64_t n = threadIdx.x; n < N; n += kCombineThreads) {
    double max = -INFINITY, target_logit = 0.0;
    for (int32_t k = 0; k < n_shards; ++k) max = fmax(max, static_cast<double>(stats[(k * N + n) * 3 + 0]));
    double sum = 0.0;
    for (int32_t k = 0; k < n_shards; ++k) {
      const float* shard = stats + (k * N + n) * 3;
      if (shard[0] != -INFINITY) sum += shard[1] * exp(shard[0] - max);  // a shard with no valid column adds nothing
      target_logit += shard[2];  // 0 from every shard but the target's
    }
    const double row_lse = max == -INFINITY ? -INFINITY : max + log(sum);
    lse[n] = static_cast<float>(row_lse);
    if (targets[n] >= 0) loss += row_lse - target_logit;
  }
  loss = block_sum<kCombineThreads>(loss, scratch);
  if (threadIdx.x == 0) *loss_sum = static_cast<float>(*loss_sum + static_cast<double>(weight) * loss);
}

// The gradient of one logit, (exp(x - lse) - onehot) · dloss; a rounded product, no fused
// multiply-add with what it is added to, so that the chunked and the element kernels agree in bits.
__device__ __forceinline__ float logit_gradient(float x, float shift, bool is_target, float dloss) {
  return __fmul_rn(expf(x - shift) - (is_target ? 1.0f : 0.0f), dloss);
}

// logit_gradient over a chunk in place; target_offset: the target's column less the chunk's first
// (in [0, K) in one chunk of the row: the other chunks skip the onehot).
template <int K>
__device__ __forceinline__ void chunk_gradient(float (&v)[K], float shift, int64_t target_offset, float dloss) {
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = expf(v[k] - shift);
  if (static_cast<uint64_t>(target_offset) < K) {
    const int target_k = static_cast<int>(target_offset);
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (k == target_k) v[k] -= 1.0f;
  }
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = __fmul_rn(v[k], dloss);
}

// Rows that start on 16 bytes (logits and dlogits): thread t takes the chunks t, t + kRowThreads, ...
// of the valid columns, the chunk that ends mid-way element by element, then (overwrite) zeros.
template <typename E, bool kOverwrite>
__global__ void __launch_bounds__(kRowThreads)
    crossentropy_backward_chunks_kernel(E* dlogits, const E* logits, const float* lse, const int32_t* targets,
                                        float dloss, int64_t col_begin, int64_t valid_cols, int64_t cols) {
  constexpr int K = kChunk<E>;
  const int64_t n = blockIdx.x;
  const int32_t target = targets[n];
  E* d = dlogits + n * cols;
  const E* x = logits + n * cols;
  const int64_t whole_chunks = valid_cols / K, row_chunks = cols / K;
  const float zeros[K] = {};
  if (target < 0) {
    if (kOverwrite)
      for (int64_t c = threadIdx.x; c < row_chunks; c += kRowThreads) store_chunk(d + c * K, zeros);
    return;
  }
  const float shift = lse[n];
  const int64_t local_target = static_cast<int64_t>(target) - col_begin;
  int64_t c = threadIdx.x;
  for (; c + (kChunksInFlight - 1) * kRowThreads < whole_chunks; c += kChunksInFlight * kRowThreads) {
    float v[kChunksInFlight][K], base[kChunksInFlight][K];
#pragma unroll
    for (int u = 0; u < kChunksInFlight; ++u) {
      load_chunk(v[u], x + (c + u * kRowThreads) * K);
      if (!kOverwrite) load_chunk(base[u], d + (c + u * kRowThreads) * K);
    }
#pragma unroll
    for (int u = 0; u < kChunksInFlight; ++u) {
      const int64_t first = (c + u * kRowThreads) * K;
      chunk_gradient(v[u], shift, local_target - first, dloss);
      if (!kOverwrite)
#pragma unroll
        for (int k = 0; k < K; ++k) v[u][k] = __fadd_rn(base[u][k], v[u][k]);
      store_chunk(d + first, v[u]);
    }
  }
  for (; c < whole_chunks; c += kRowThreads) {
    float v[K], base[K];
    load_chunk(v, x + c * K);
    if (!kOverwrite) load_chunk(base, d + c * K);
    chunk_gradient(v, shift, local_target - c * K, dloss);
    if (!kOverwrite)
#pragma unroll
      for (int k = 0; k < K; ++k) v[k] = __fadd_rn(base[k], v[k]);
    store_chunk(d + c * K, v);
  }
  if (c == whole_chunks && c * K < valid_cols) {
    for (int64_t i = c * K; i < (c + 1) * K; ++i) {
      if (i < valid_cols) {
        const float g = logit_gradient(load(x + i), shift, i == local_target, dloss);
        store(d + i, kOverwrite ? g : __fadd_rn(load(d + i), g));
      } else if (kOverwrite) {
        store(d + i, 0.0f);
      }
    }
  }
  if (kOverwrite)
    for (c = (valid_cols + K - 1) / K + threadIdx.x; c < row_chunks; c += kRowThreads) store_chunk(d + c * K, zeros);
}

// Any other rows, element by element.
template <typename E>
__global__ void __launch_bounds__(kRowThreads)
    crossentropy_backward_elements_kernel(E* dlogits, const E* logits, const float* lse, const int32_t* targets,
                                          float dloss, int64_t col_begin, int64_t valid_cols, int64_t cols,
                                          bool overwrite) {
  const int64_t n = blockIdx.x;
  const int32_t target = targets[n];
  E* d = dlogits + n * cols;
  const E* x = logits + n * cols;
  if (target < 0) {
    if (overwrite)
      for (int64_t i = threadIdx.x; i < cols; i += kRowThreads) store(d + i, 0.0f);
    return;
  }
  const float shift = lse[n];
  const int64_t local_target = static_cast<int64_t>(target) - col_begin;
  for (int64_t i = threadIdx.x; i < cols; i += kRowThreads) {
    if (i < valid_cols) {
      const float g = logit_gradient(load(x + i), shift, i == local_target, dloss);
      store(d + i, overwrite ? g : __fadd_rn(load(d + i), g));
    } else if (overwrite) {
      store(d + i, 0.0f);
    }
  }
}

// probs may alias logits: the target's logit is read, and every block reduction done, before
// the first write.
__global__ void crossentropy_probs_forward_kernel(float* losses, float* probs, const float* logits,
                                                  const int32_t* targets, int64_t V, int64_t Vp) {
  __shared__ float scratch[kRowThreads / 32];
  const int64_t n = blockIdx.x;
  const float* x = logits + n * Vp;
  float* p = probs + n * Vp;
  const int32_t target = targets[n];
  const float target_logit = target >= 0 ? x[target] : 0.0f;
  float max = -INFINITY;
  for (int64_t i = threadIdx.x; i < V; i += kRowThreads) max = fmaxf(max, x[i]);
  max = block_max<kRowThreads>(max, scratch);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < V; i += kRowThreads) sum += expf(x[i] - max);
  sum = block_sum<kRowThreads>(sum, scratch);  // ends with a barrier: every read is done
  const float inv = 1.0f / sum;
  for (int64_t i = threadIdx.x; i < Vp; i += kRowThreads) p[i] = i < V ? expf(x[i] - max) * inv : 0.0f;
  if (threadIdx.x == 0)
    losses[n] = target >= 0 ? static_cast<float>(log(static_cast<double>(sum)) + max - target_logit) : 0.0f;
}

__global__ void crossentropy_probs_backward_kernel(float* dlogits, const float* probs, const int32_t* targets,
                                                   float dloss, int64_t V, int64_t Vp) {
  const int64_t n = blockIdx.x;
  const int32_t target = targets[n];
  if (target < 0) return;
  for (int64_t i = threadIdx.x; i < V; i += kRowThreads)
    dlogits[n * Vp + i] += (probs[n * Vp + i] - (i == target ? 1.0f : 0.0f)) * dloss;
}

template <typename E>
void launch_stats(float* stats, const E* logits, const int32_t* targets, int64_t N, int64_t col_begin,
                  int64_t valid_cols, int64_t cols, cudaStream_t stream) {
  const unsigned rows = static_cast<unsigned>(N);
  if (rows_in_chunks(cols, sizeof(E), logits))
    crossentropy_stats_kernel<E, true>
        <<<rows, kRowThreads, 0, stream>>>(stats, logits, targets, col_begin, valid_cols, cols);
  else
    crossentropy_stats_kernel<E, false>
        <<<rows, kRowThreads, 0, stream>>>(stats, logits, targets, col_begin, valid_cols, cols);
}

template <typename E>
void launch_backward(E* dlogits, const E* logits, const float* lse, const int32_t* targets, float dloss, int64_t N,
                     int64_t col_begin, int64_t valid_cols, int64_t cols, bool overwrite, cudaStream_t stream) {
  const unsigned rows = static_cast<unsigned>(N);
  if (!rows_in_chunks(cols, sizeof(E), logits) || !rows_in_chunks(cols, sizeof(E), dlogits))
    crossentropy_backward_elements_kernel<E><<<rows, kRowThreads, 0, stream>>>(dlogits, logits, lse, targets, dloss,
                                                                               col_begin, valid_cols, cols, overwrite);
  else if (overwrite)
    crossentropy_backward_chunks_kernel<E, true>
        <<<rows, kRowThreads, 0, stream>>>(dlogits, logits, lse, targets, dloss, col_begin, valid_cols, cols);
  else
    crossentropy_backward_chunks_kernel<E, false>
        <<<rows, kRowThreads, 0, stream>>>(dlogits, logits, lse, targets, dloss, col_begin, valid_cols, cols);
}

}  // namespace

void crossentropy_stats(Elem e, float* stats, const void* logits, const int32_t* targets, int64_t N, int64_t col_begin,
                        int64_t valid_cols, int64_t cols, cudaStream_t stream) {
  if (N <= 0) return;
  if (e == Elem::bf16)
    launch_stats(stats, static_cast<const bf16*>(logits), targets, N, col_begin, valid_cols, cols, stream);
  else
    launch_stats(stats, static_cast<const float*>(logits), targets, N, col_begin, valid_cols, cols, stream);
}

void crossentropy_combine(float* lse, float* loss_sum, const float* stats, int32_t n_shards, const int32_t* targets,
                          int64_t N, float weight, cudaStream_t stream) {
  if (N <= 0) return;
  crossentropy_combine_kernel<<<1, kCombineThreads, 0, stream>>>(lse, loss_sum, stats, n_shards, targets, N, weight);
}

void crossentropy_backward(Elem e, void* dlogits, const void* logits, const float* lse, const int32_t* targets,
                           float dloss, int64_t N, int64_t col_begin, int64_t valid_cols, int64_t cols, bool overwrite,
                           cudaStream_t stream) {
  if (N <= 0) return;
  if (e == Elem::bf16)
    launch_backward(static_cast<bf16*>(dlogits), static_cast<const bf16*>(logits), lse, targets, dloss, N, col_begin,
                    valid_cols, cols, overwrite, stream);
  else
    launch_backward(static_cast<float*>(dlogits), static_cast<const float*>(logits), lse, targets, dloss, N, col_begin,
                    valid_cols, cols, overwrite, stream);
}

void crossentropy_probs_forward(float* losses, float* probs, const float* logits, const int32_t* targets, int64_t N,
                                int64_t V, int64_t Vp, cudaStream_t stream) {
  if (N <= 0) return;
  crossentropy_probs_forward_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, stream>>>(losses, probs, logits,
                                                                                          targets, V, Vp);
}

void crossentropy_probs_backward(float* dlogits, const float* probs, const int32_t* targets, float dloss, int64_t N,
                                 int64_t V, int64_t Vp, cudaStream_t stream) {
  if (N <= 0) return;
  crossentropy_probs_backward_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, stream>>>(dlogits, probs, targets,
                                                                                           dloss, V, Vp);
}

}  // namespace keel::cuda
