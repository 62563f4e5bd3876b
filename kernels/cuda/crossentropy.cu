// Cross-entropy over the vocabulary without a probability array (0.8): per row, statistics of
// its logits (max, Σ exp(x - max), the target's logit), combined over vocabulary shards into a
// log-sum-exp and the loss, then the gradient exp(x - lse) - onehot written or added in one pass.
// Also 0.1's fp32 pair that does keep probabilities. A block per row; every sum is a fixed tree
// (common.cuh), and the loss over rows is summed by one block in a fixed order: no atomics.
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace keel::cuda {
namespace {

constexpr int kRowThreads = 256;

__device__ __forceinline__ bool owns_target(int32_t target, int64_t col_begin, int64_t valid_cols) {
  const int64_t local = static_cast<int64_t>(target) - col_begin;
  return target >= 0 && local >= 0 && local < valid_cols;
}

template <typename E>
__global__ void crossentropy_stats_kernel(float* stats, const E* logits, const int32_t* targets, int64_t col_begin,
                                          int64_t valid_cols, int64_t cols) {
  __shared__ float scratch[kRowThreads / 32];
  const int64_t n = blockIdx.x;
  const E* x = logits + n * cols;
  float max = -INFINITY;
  for (int64_t i = threadIdx.x; i < valid_cols; i += kRowThreads) max = fmaxf(max, load(x + i));
  max = block_max<kRowThreads>(max, scratch);
  float sum = 0.0f;
  if (max > -INFINITY)
    for (int64_t i = threadIdx.x; i < valid_cols; i += kRowThreads) sum += expf(load(x + i) - max);
  sum = block_sum<kRowThreads>(sum, scratch);
  if (threadIdx.x == 0) {
    const int32_t target = targets[n];
    stats[n * 3 + 0] = max;
    stats[n * 3 + 1] = sum;
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

template <typename E>
__global__ void crossentropy_backward_kernel(E* dlogits, const E* logits, const float* lse, const int32_t* targets,
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
    float g = 0.0f;
    if (i < valid_cols) g = (expf(load(x + i) - shift) - (i == local_target ? 1.0f : 0.0f)) * dloss;
    if (overwrite)
      store(d + i, g);
    else if (i < valid_cols)
      store(d + i, load(d + i) + g);
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

}  // namespace

void crossentropy_stats(Elem e, float* stats, const void* logits, const int32_t* targets, int64_t N, int64_t col_begin,
                        int64_t valid_cols, int64_t cols, cudaStream_t stream) {
  if (N <= 0) return;
  if (e == Elem::bf16)
    crossentropy_stats_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, stream>>>(
        stats, static_cast<const bf16*>(logits), targets, col_begin, valid_cols, cols);
  else
    crossentropy_stats_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, stream>>>(
        stats, static_cast<const float*>(logits), targets, col_begin, valid_cols, cols);
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
    crossentropy_backward_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, stream>>>(
        static_cast<bf16*>(dlogits), static_cast<const bf16*>(logits), lse, targets, dloss, col_begin, valid_cols, cols,
        overwrite);
  else
    crossentropy_backward_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, stream>>>(
        static_cast<float*>(dlogits), static_cast<const float*>(logits), lse, targets, dloss, col_begin, valid_cols,
        cols, overwrite);
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
