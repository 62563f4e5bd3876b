// Reductions whose result must not depend on the run: the sum of squares for gradient-norm
// clipping, in two passes over a FIXED grid (kSumSquaresBlocks blocks, each a fixed tree, then
// one block adding the partials in a fixed tree), so the bits depend on n alone, not on the GPU
// or on timing; and the column sums of a matmul's bias gradient, a block per 32 columns
// walking the rows in a fixed order.
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace keel::cuda {
namespace {

constexpr int kReduceThreads = 256;

template <typename Acc, typename E>
__global__ void sum_squares_partial_kernel(Acc* partial, const E* x, int64_t n) {
  __shared__ Acc scratch[kReduceThreads / 32];
  Acc sum = 0;
  KEEL_GRID_STRIDE(i, n) {
    const Acc v = load(x + i);
    sum += v * v;
  }
  sum = block_sum<kReduceThreads>(sum, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// accumulate: *out += Σ partial, else *out = Σ partial.
template <typename Acc>
__global__ void sum_partials_kernel(Acc* out, const Acc* partial, bool accumulate) {
  __shared__ Acc scratch[kReduceThreads / 32];
  Acc sum = 0;
  for (int i = threadIdx.x; i < kSumSquaresBlocks; i += kReduceThreads) sum += partial[i];
  sum = block_sum<kReduceThreads>(sum, scratch);
  if (threadIdx.x == 0) *out = accumulate ? *out + sum : sum;
}

constexpr int kRowGroups = 16;

// Block (32, kRowGroups): column blockIdx.x * 32 + threadIdx.x, row group threadIdx.y.
template <typename E>
__global__ void column_sum_kernel(float* dbias, const E* dout, int64_t N, int64_t OC) {
  __shared__ float partial[kRowGroups][33];
  const int64_t o = blockIdx.x * int64_t(32) + threadIdx.x;
  float sum = 0.0f;
  if (o < OC)
    for (int64_t n = threadIdx.y; n < N; n += kRowGroups) sum += load(dout + n * OC + o);
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && o < OC) {
    float total = 0.0f;
    for (int r = 0; r < kRowGroups; ++r) total += partial[r][threadIdx.x];
    dbias[o] += total;
  }
}

}  // namespace

void sum_squares(Elem e, const void* x, int64_t n, float* acc, float* partial, cudaStream_t stream) {
  if (n <= 0) return;
  if (e == Elem::bf16)
    sum_squares_partial_kernel<float>
        <<<kSumSquaresBlocks, kReduceThreads, 0, stream>>>(partial, static_cast<const bf16*>(x), n);
  else
    sum_squares_partial_kernel<float>
        <<<kSumSquaresBlocks, kReduceThreads, 0, stream>>>(partial, static_cast<const float*>(x), n);
  sum_partials_kernel<<<1, kReduceThreads, 0, stream>>>(acc, partial, true);
}

void sum_squares_double(const float* x, int64_t n, double* out, double* partial, cudaStream_t stream) {
  sum_squares_partial_kernel<double><<<kSumSquaresBlocks, kReduceThreads, 0, stream>>>(partial, x, n);
  sum_partials_kernel<<<1, kReduceThreads, 0, stream>>>(out, partial, false);
}

void column_sum(Elem e, float* dbias, const void* dout, int64_t N, int64_t OC, cudaStream_t stream) {
  if (N <= 0 || OC <= 0) return;
  const unsigned blocks = static_cast<unsigned>((OC + 31) / 32);
  if (e == Elem::bf16)
    column_sum_kernel<<<blocks, dim3(32, kRowGroups), 0, stream>>>(dbias, static_cast<const bf16*>(dout), N, OC);
  else
    column_sum_kernel<<<blocks, dim3(32, kRowGroups), 0, stream>>>(dbias, static_cast<const float*>(dout), N, OC);
}

}  // namespace keel::cuda
