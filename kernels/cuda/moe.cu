// A mixture-of-experts layer's ops on the GPU, as kernels/cpu computes them (moe_route.cpp,
// moe_permute.cpp): routing one thread per token (E is small: tens to a few hundred experts), the
// plan one block per expert (each block ranks its expert's pairs in token order with a block-wide
// prefix sum, so the positions are the cpu's and every run's), and the moves one thread per
// element. No float atomics anywhere: the results are the same on every run.
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace keel::cuda {
namespace {

// Softmax of one row into p (p may be the output row), returning log Σ exp.
__device__ float softmax_row(float* p, const float* logits, int32_t E) {
  float max = logits[0];
  for (int32_t e = 1; e < E; ++e) max = fmaxf(max, logits[e]);
  float sum = 0.0f;
  for (int32_t e = 0; e < E; ++e) {
    p[e] = expf(logits[e] - max);
    sum += p[e];
  }
  for (int32_t e = 0; e < E; ++e) p[e] /= sum;
  return max + logf(sum);
}

__global__ void moe_route_kernel(float* weights, int32_t* experts, float* scores, const float* logits,
                                 const float* selection_bias, int64_t N, int32_t E, int32_t K, bool sigmoid,
                                 bool normalize) {
  KEEL_GRID_STRIDE(n, N) {
    const float* l = logits + n * E;
    float* s = scores + n * E;
    if (sigmoid) {
      for (int32_t e = 0; e < E; ++e) s[e] = 1.0f / (1.0f + expf(-l[e]));
    } else {
      softmax_row(s, l, E);
    }
    int32_t* chosen = experts + n * K;
    for (int32_t j = 0; j < K; ++j) {  // the j-th largest key; a strict > keeps the lower index on a tie
      int32_t best = -1;
      float best_key = 0.0f;
      for (int32_t e = 0; e < E; ++e) {
        bool taken = false;
        for (int32_t i = 0; i < j && !taken; ++i) taken = chosen[i] == e;
        if (taken) continue;
        const float key = selection_bias ? s[e] + selection_bias[e] : s[e];
        if (best < 0 || key > best_key) best = e, best_key = key;
      }
      chosen[j] = best;
    }
    float* w = weights + n * K;
    float sum = 0.0f;
    for (int32_t j = 0; j < K; ++j) sum += w[j] = s[chosen[j]];
    if (normalize && sum > 0.0f)  // chosen scores that are all 0 (underflowed) stay 0, not 0/0
      for (int32_t j = 0; j < K; ++j) w[j] /= sum;
  }
}

// The row's ∂loss/∂scores is built in its dlogits row, then turned into ∂loss/∂logits in place.
__global__ void moe_route_backward_kernel(float* dlogits, const float* dweights, const float* logits,
                                          const float* scores, const int32_t* experts, const float* expert_dscores,
                                          float z_grad, int64_t N, int32_t E, int32_t K, bool sigmoid,
                                          bool normalize) {
  KEEL_GRID_STRIDE(n, N) {
    const float* s = scores + n * E;
    const int32_t* chosen = experts + n * K;
    const float* dw = dweights + n * K;
    float* dl = dlogits + n * E;
    for (int32_t e = 0; e < E; ++e) dl[e] = expert_dscores ? expert_dscores[e] : 0.0f;
    if (normalize) {
      float S = 0.0f, dw_dot_w = 0.0f;
      for (int32_t j = 0; j < K; ++j) S += s[chosen[j]];
      if (S > 0.0f) {  // where S is 0 the forward left the weights 0 (constant): nothing to add
        for (int32_t j = 0; j < K; ++j) dw_dot_w += dw[j] * (s[chosen[j]] / S);
        for (int32_t j = 0; j < K; ++j) dl[chosen[j]] += (dw[j] - dw_dot_w) / S;
      }
    } else {
      for (int32_t j = 0; j < K; ++j) dl[chosen[j]] += dw[j];
    }
    if (sigmoid) {
      for (int32_t e = 0; e < E; ++e) dl[e] = dl[e] * s[e] * (1.0f - s[e]);
    } else {
      float ds_dot_s = 0.0f;
      for (int32_t e = 0; e < E; ++e) ds_dot_s += dl[e] * s[e];
      for (int32_t e = 0; e < E; ++e) dl[e] = s[e] * (dl[e] - ds_dot_s);
    }
    if (z_grad != 0.0f) {
      const float* l = logits + n * E;
      float max = l[0];
      for (int32_t e = 1; e < E; ++e) max = fmaxf(max, l[e]);
      float sum = 0.0f;
      for (int32_t e = 0; e < E; ++e) sum += expf(l[e] - max);
      const float lse = max + logf(sum);
      for (int32_t e = 0; e < E; ++e) dl[e] += z_grad * 2.0f * lse * (expf(l[e] - max) / sum);
    }
  }
}

constexpr int kPlanThreads = 256;

// Block e: rank[i] = how many pairs before i chose e, for each pair i that chose e; counts[e]. A
// pair whose expert is outside [0,E) lowers *first_bad to its index (an integer atomic: exact).
__global__ void moe_rank_kernel(int32_t* rank, int64_t* counts, unsigned long long* first_bad, const int32_t* experts,
                                int64_t pairs, int32_t E) {
  __shared__ int64_t warp_totals[kPlanThreads / 32];
  const int32_t e = blockIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int64_t before = 0;  // pairs of e in earlier chunks
  for (int64_t chunk = 0; chunk < pairs; chunk += kPlanThreads) {
    const int64_t i = chunk + threadIdx.x;
    const int32_t x = i < pairs ? experts[i] : -1;
    if (e == 0 && i < pairs && (x < 0 || x >= E)) atomicMin(first_bad, static_cast<unsigned long long>(i));
    const bool mine = x == e;
    const unsigned ballot = __ballot_sync(0xffffffffu, mine);
    const int64_t in_warp = __popc(ballot & ((1u << lane) - 1u));
    if (lane == 0) warp_totals[warp] = __popc(ballot);
    __syncthreads();
    int64_t in_block = 0, chunk_total = 0;
    for (int w = 0; w < kPlanThreads / 32; ++w) {
      if (w < warp) in_block += warp_totals[w];
      chunk_total += warp_totals[w];
    }
    if (mine) rank[i] = static_cast<int32_t>(before + in_block + in_warp);
    before += chunk_total;
    __syncthreads();
  }
  if (threadIdx.x == 0) counts[e] = before;
}

// positions[i] = the rows of the experts before experts[i], plus its rank among its own.
__global__ void moe_place_kernel(int32_t* positions, const int64_t* counts, const int32_t* experts, int64_t pairs,
                                 int32_t E) {
  KEEL_GRID_STRIDE(i, pairs) {
    const int32_t x = experts[i];
    if (x < 0 || x >= E) continue;  // reported by moe_rank_kernel
    int64_t offset = 0;
    for (int32_t e = 0; e < x; ++e) offset += counts[e];
    positions[i] = static_cast<int32_t>(offset + positions[i]);
  }
}

template <typename T>
__global__ void moe_permute_kernel(T* out, const T* inp, const float* scale, const int32_t* positions, int64_t N,
                                   int32_t K, int64_t C) {
  KEEL_GRID_STRIDE(idx, N * K * C) {
    const int64_t c = idx % C, pair = idx / C, n = pair / K;
    const float s = scale ? scale[pair] : 1.0f;
    store(out + static_cast<int64_t>(positions[pair]) * C + c, s * load(inp + n * C + c));
  }
}

template <typename T>
__global__ void moe_unpermute_kernel(T* out, const T* inp, const float* scale, const int32_t* positions, int64_t N,
                                     int32_t K, int64_t C) {
  KEEL_GRID_STRIDE(idx, N * C) {
    const int64_t c = idx % C, n = idx / C;
    float sum = 0.0f;
    for (int32_t j = 0; j < K; ++j) {
      const float s = scale ? scale[n * K + j] : 1.0f;
      sum += s * load(inp + static_cast<int64_t>(positions[n * K + j]) * C + c);
    }
    store(out + idx, sum);
  }
}

// One warp per (token, slot): the dot product of dout's row with the pair's permuted row.
template <typename T>
__global__ void moe_unpermute_scale_backward_kernel(float* dscale, const T* dout, const T* inp, const int32_t* positions,
                                                    int64_t N, int32_t K, int64_t C) {
  const int64_t pair = blockIdx.x * int64_t(kThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (pair >= N * K) return;
  const T* g = dout + (pair / K) * C;
  const T* x = inp + static_cast<int64_t>(positions[pair]) * C;
  float sum = 0.0f;
  for (int64_t c = lane; c < C; c += 32) sum += load(g + c) * load(x + c);
  sum = warp_sum(sum);
  if (lane == 0) dscale[pair] += sum;
}

}  // namespace

void moe_route(float* weights, int32_t* experts, float* scores, const float* logits, const float* selection_bias,
               int64_t N, int32_t E, int32_t K, bool sigmoid, bool normalize, cudaStream_t stream) {
  if (N <= 0) return;
  moe_route_kernel<<<grid_for(N, 128), 128, 0, stream>>>(weights, experts, scores, logits, selection_bias, N, E, K,
                                                          sigmoid, normalize);
}

void moe_route_backward(float* dlogits, const float* dweights, const float* logits, const float* scores,
                        const int32_t* experts, const float* expert_dscores, float z_grad, int64_t N, int32_t E,
                        int32_t K, bool sigmoid, bool normalize, cudaStream_t stream) {
  if (N <= 0) return;
  moe_route_backward_kernel<<<grid_for(N, 128), 128, 0, stream>>>(dlogits, dweights, logits, scores, experts,
                                                                   expert_dscores, z_grad, N, E, K, sigmoid, normalize);
}

void moe_permute_plan(int32_t* positions, int64_t* counts, unsigned long long* first_bad, const int32_t* experts,
                      int64_t N, int32_t E, int32_t K, cudaStream_t stream) {
  const int64_t pairs = N * K;
  moe_rank_kernel<<<E, kPlanThreads, 0, stream>>>(positions, counts, first_bad, experts, pairs, E);
  if (pairs > 0) moe_place_kernel<<<grid_for(pairs), kThreads, 0, stream>>>(positions, counts, experts, pairs, E);
}

void moe_permute(Elem e, void* out, const void* inp, const float* scale, const int32_t* positions, int64_t N, int32_t K,
                 int64_t C, cudaStream_t stream) {
  const int64_t n = N * K * C;
  if (n <= 0) return;
  if (e == Elem::bf16)
    moe_permute_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<bf16*>(out), static_cast<const bf16*>(inp),
                                                             scale, positions, N, K, C);
  else
    moe_permute_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<float*>(out), static_cast<const float*>(inp),
                                                             scale, positions, N, K, C);
}

void moe_unpermute(Elem e, void* out, const void* inp, const float* scale, const int32_t* positions, int64_t N,
                   int32_t K, int64_t C, cudaStream_t stream) {
  const int64_t n = N * C;
  if (n <= 0) return;
  if (e == Elem::bf16)
    moe_unpermute_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<bf16*>(out), static_cast<const bf16*>(inp),
                                                               scale, positions, N, K, C);
  else
    moe_unpermute_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<float*>(out),
                                                               static_cast<const float*>(inp), scale, positions, N, K, C);
}

void moe_unpermute_scale_backward(Elem e, float* dscale, const void* dout, const void* inp, const int32_t* positions,
                                  int64_t N, int32_t K, int64_t C, cudaStream_t stream) {
  const int64_t pairs = N * K;
  if (pairs <= 0) return;
  const unsigned blocks = static_cast<unsigned>((pairs + kThreads / 32 - 1) / (kThreads / 32));
  if (e == Elem::bf16)
    moe_unpermute_scale_backward_kernel<<<blocks, kThreads, 0, stream>>>(
        dscale, static_cast<const bf16*>(dout), static_cast<const bf16*>(inp), positions, N, K, C);
  else
    moe_unpermute_scale_backward_kernel<<<blocks, kThreads, 0, stream>>>(
        dscale, static_cast<const float*>(dout), static_cast<const float*>(inp), positions, N, K, C);
}

}  // namespace keel::cuda
