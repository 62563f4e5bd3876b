// Reductions whose result must not depend on the run: the sum of squares for gradient-norm
// clipping, in two passes over a FIXED grid (kSumSquaresBlocks blocks, each a fixed tree, then
// one block adding the partials in a fixed tree), so the bits depend on n alone, not on the GPU
// or on timing; and the column sums of a matmul's bias gradient, over fixed chunks of rows and
// then the chunks in order.
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

// The column sums in two passes, as layernorm.cu sums its parameter gradients: blocks sum fixed
// chunks of kColumnChunkRows rows into scratch, then a thread per column adds the chunks in order.
// One block per 32 columns walking every row (the first version) kept 24 of an H200's 132 SMs
// busy at GPT-2's 768 columns; the chunks are a constant, so the bits do not depend on the GPU.
constexpr int kRowGroups = 16;
constexpr int64_t kColumnChunkRows = 256;

__host__ __device__ inline int64_t column_chunks(int64_t N) { return (N + kColumnChunkRows - 1) / kColumnChunkRows; }

// Block (32, kRowGroups) at (column block x, chunk y); thread x takes kCols adjacent columns (8
// bf16 in one 16-byte load where the rows allow it, else 1), thread row y rows y, y + 16, ...
template <typename E, int kCols>
__global__ void column_sum_partial_kernel(float* partial, const E* dout, int64_t N, int64_t OC) {
  __shared__ float sums[kRowGroups][32 * kCols + 1];
  const int64_t col = (blockIdx.x * int64_t(32) + threadIdx.x) * kCols;
  for (int64_t chunk = blockIdx.y; chunk < column_chunks(N); chunk += gridDim.y) {  // past 65535 chunks
    const int64_t first = chunk * kColumnChunkRows, end = first + kColumnChunkRows < N ? first + kColumnChunkRows : N;
    float acc[kCols] = {};
    if (col < OC)
      for (int64_t n = first + threadIdx.y; n < end; n += kRowGroups) {
        if constexpr (kCols == 8) {
          float v[8];
          load8(v, dout + n * OC + col);
#pragma unroll
          for (int k = 0; k < 8; ++k) acc[k] += v[k];
        } else {
          acc[0] += load(dout + n * OC + col);
        }
      }
#pragma unroll
    for (int k = 0; k < kCols; ++k) sums[threadIdx.y][threadIdx.x * kCols + k] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0 && col < OC)
#pragma unroll
      for (int k = 0; k < kCols; ++k) {
        float total = 0.0f;
        for (int r = 0; r < kRowGroups; ++r) total += sums[r][threadIdx.x * kCols + k];
        partial[chunk * OC + col + k] = total;
      }
    __syncthreads();  // sums are read before the next chunk writes them
  }
}

__global__ void column_sum_total_kernel(float* dbias, const float* partial, int64_t chunks, int64_t OC) {
  const int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (o >= OC) return;
  float total = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) total += partial[k * OC + o];
  dbias[o] += total;
}

template <typename E, int kCols>
void column_sum_typed(float* dbias, const E* dout, int64_t N, int64_t OC, float* scratch, cudaStream_t stream) {
  const int64_t chunks = column_chunks(N);
  const dim3 grid(static_cast<unsigned>((OC + 32 * kCols - 1) / (32 * kCols)),
                  static_cast<unsigned>(chunks < 65535 ? chunks : 65535));
  column_sum_partial_kernel<E, kCols><<<grid, dim3(32, kRowGroups), 0, stream>>>(scratch, dout, N, OC);
  column_sum_total_kernel<<<static_cast<unsigned>((OC + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      dbias, scratch, chunks, OC);
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

int64_t column_sum_scratch_floats(int64_t N, int64_t OC) { return N > 0 && OC > 0 ? column_chunks(N) * OC : 0; }

void column_sum(Elem e, float* dbias, const void* dout, int64_t N, int64_t OC, float* scratch, cudaStream_t stream) {
  if (N <= 0 || OC <= 0) return;
  if (e == Elem::bf16 && in_eights(OC, {dout}))
    column_sum_typed<bf16, 8>(dbias, static_cast<const bf16*>(dout), N, OC, scratch, stream);
  else if (e == Elem::bf16)
    column_sum_typed<bf16, 1>(dbias, static_cast<const bf16*>(dout), N, OC, scratch, stream);
  else
    column_sum_typed<float, 1>(dbias, static_cast<const float*>(dout), N, OC, scratch, stream);
}

}  // namespace keel::cuda
