// Token and position embeddings, forward and backward, for the whole table or a block of its
// rows (the vocabulary split over tensor-parallel ranks). A token can repeat within a batch, so
// the dwte scatter cannot simply add from every position at once without float atomics, whose
// order varies between runs. Instead the block of the FIRST position holding a token owns that
// token's row: it gathers every later position with the same token, in position order, and adds
// their gradients. Each block scans the token list, O((B·T)²) integer reads in all: fine at
// llm.c's batch sizes, and the same bits on every run. (A sort by token would scale better.)
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace keel::cuda {
namespace {

template <typename E>
__global__ void embedding_forward_kernel(E* out, const int32_t* tokens, const E* wte_rows, const E* wpe, int64_t T,
                                         int64_t C, int64_t row_begin, int64_t rows, int64_t n) {
  KEEL_GRID_STRIDE(i, n) {
    const int64_t bt = i / C, c = i % C, t = bt % T;
    const int64_t row = static_cast<int64_t>(tokens[bt]) - row_begin;
    float v = row >= 0 && row < rows ? load(wte_rows + row * C + c) : 0.0f;
    if (wpe) v += load(wpe + t * C + c);
    store(out + i, v);
  }
}

// dwpe(T,C) += Σ_b dout(b,t,:): a thread per (t, c), walking b in order.
template <typename E>
__global__ void embedding_dwpe_kernel(float* dwpe, const E* dout, int64_t B, int64_t T, int64_t C) {
  KEEL_GRID_STRIDE(i, T * C) {
    float acc = dwpe[i];
    for (int64_t b = 0; b < B; ++b) acc += load(dout + b * T * C + i);
    dwpe[i] = acc;
  }
}

constexpr int kScanThreads = 256;

template <typename E>
__global__ void embedding_dwte_kernel(float* dwte_rows, const E* dout, const int32_t* tokens, int64_t BT, int64_t C,
                                      int64_t row_begin, int64_t rows) {
  __shared__ int64_t positions[kScanThreads];
  __shared__ int warp_counts[kScanThreads / 32];
  const int64_t first = blockIdx.x;
  const int32_t token = tokens[first];
  const int64_t row = static_cast<int64_t>(token) - row_begin;
  if (row < 0 || row >= rows) return;  // uniform over the block
  for (int64_t base = 0; base < first; base += kScanThreads) {
    const int64_t i = base + threadIdx.x;
    if (__syncthreads_or(i < first && tokens[i] == token)) return;  // an earlier block owns this row
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float* d = dwte_rows + row * C;
  for (int64_t base = first; base < BT; base += kScanThreads) {
    // The positions of this chunk that hold the token, compacted in position order.
    const int64_t i = base + threadIdx.x;
    const bool match = i < BT && tokens[i] == token;
    const unsigned ballot = __ballot_sync(0xffffffffu, match);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int offset = 0, count = 0;
    for (int w = 0; w < kScanThreads / 32; ++w) {
      offset += w < warp ? warp_counts[w] : 0;
      count += warp_counts[w];
    }
    if (match) positions[offset + __popc(ballot & ((1u << lane) - 1u))] = i;
    __syncthreads();
    if (count)  // each gradient added onto the row in position order, as kernels/cpu does
      for (int64_t c = threadIdx.x; c < C; c += kScanThreads) {
        float acc = d[c];
        for (int k = 0; k < count; ++k) acc += load(dout + positions[k] * C + c);
        d[c] = acc;
      }
    __syncthreads();  // positions and warp_counts are rewritten by the next chunk
  }
}

template <typename E>
void backward(float* dwte_rows, float* dwpe, const E* dout, const int32_t* tokens, int64_t B, int64_t T, int64_t C,
              int64_t row_begin, int64_t rows, cudaStream_t stream) {
  if (dwpe) embedding_dwpe_kernel<<<grid_for(T * C), kThreads, 0, stream>>>(dwpe, dout, B, T, C);
  if (dwte_rows)
    embedding_dwte_kernel<<<static_cast<unsigned>(B * T), kScanThreads, 0, stream>>>(dwte_rows, dout, tokens, B * T, C,
                                                                                     row_begin, rows);
}

}  // namespace

void embedding_forward(Elem e, void* out, const int32_t* tokens, const void* wte_rows, const void* wpe, int64_t B,
                       int64_t T, int64_t C, int64_t row_begin, int64_t rows, cudaStream_t stream) {
  const int64_t n = B * T * C;
  if (n <= 0) return;
  if (e == Elem::bf16)
    embedding_forward_kernel<<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<bf16*>(out), tokens, static_cast<const bf16*>(wte_rows), static_cast<const bf16*>(wpe), T, C,
        row_begin, rows, n);
  else
    embedding_forward_kernel<<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<float*>(out), tokens, static_cast<const float*>(wte_rows), static_cast<const float*>(wpe), T, C,
        row_begin, rows, n);
}

void embedding_backward(Elem e, float* dwte_rows, float* dwpe, const void* dout, const int32_t* tokens, int64_t B,
                        int64_t T, int64_t C, int64_t row_begin, int64_t rows, cudaStream_t stream) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  if (e == Elem::bf16)
    backward(dwte_rows, dwpe, static_cast<const bf16*>(dout), tokens, B, T, C, row_begin, rows, stream);
  else
    backward(dwte_rows, dwpe, static_cast<const float*>(dout), tokens, B, T, C, row_begin, rows, stream);
}

}  // namespace keel::cuda
