// How one product is split over the OpenMP threads when keel threads sgemm itself: the output
// C(M,N) is cut into a grid of blocks, one per thread, and each thread makes one single-threaded
// BLAS call for its block. Every element is still summed over the whole K by one call, in the
// order the library's kernel uses, so the split changes which thread computes an element but
// not its bits (tested with Debian's OpenBLAS 0.3.21; kGemmMinBlockMacs keeps blocks away from
// its small-matrix kernels, and a library whose kernels depend on the thread count could still
// differ). The grid is chosen to pack the least input per thread: a row block packs its
// rows of A (M/rows × K), a column block its columns of B (K × N/cols).
#pragma once

#include <cstdint>

namespace keel::cpu {

// Blocks start on multiples of this many rows or columns (64 bytes of floats), so each thread's
// block of C starts cache-line aligned when C does, and every block but the last is a whole
// number of the kernels' register tiles wide.
constexpr int64_t kGemmBlockUnit = 16;

// No block has fewer multiply-adds than this, so a product smaller than two of them runs as one
// call on the calling thread. Two reasons: waking the team costs a few microseconds, what one
// thread takes for ~2^18 multiply-adds; and OpenBLAS sends products under 100³ multiply-adds to
// its small-matrix kernels, which sum in another order than its packed kernels, so a block small
// enough to go there while the whole product would not changes bits (seen at 97 × 35 × 203).
constexpr int64_t kGemmMinBlockMacs = int64_t(1) << 20;

struct GemmGrid {
  int row_blocks = 1;
  int col_blocks = 1;
  int blocks() const { return row_blocks * col_blocks; }
};

// The grid for `threads` threads: as many blocks as threads where the product has enough rows
// and columns of kGemmBlockUnit and every block kGemmMinBlockMacs, fewer where it has not.
GemmGrid choose_gemm_grid(int64_t M, int64_t N, int64_t K, int threads);

// The [begin, end) of part `index` of `parts` over `extent`, cut on kGemmBlockUnit boundaries
// (the last part takes the remainder). Parts differ by at most one unit.
struct GemmSpan {
  int64_t begin = 0;
  int64_t end = 0;
};
GemmSpan gemm_block_span(int64_t extent, int index, int parts);

// cblas_sgemm as every CBLAS library exports it (OpenBLAS, BLIS, MKL), and cblas.h's enum
// values; cblas.h is not included so nothing links a BLAS by accident.
using CblasSgemm = void (*)(int order, int transa, int transb, int M, int N, int K, float alpha, const float* A,
                            int lda, const float* B, int ldb, float beta, float* C, int ldc);
constexpr int kCblasRowMajor = 101, kCblasNoTrans = 111, kCblasTrans = 112;

// The row-major product C(M,N) = alpha·op(A)·op(B) + beta·C as `grid` blocks, block i on
// OpenMP thread i, each one call of `sgemm` (which should then run single-threaded). Every size
// and leading dimension must fit an int (the caller checks, outside the parallel region).
void sgemm_by_blocks(CblasSgemm sgemm, GemmGrid grid, bool transpose_a, bool transpose_b, int64_t M, int64_t N,
                     int64_t K, float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                     float* C, int64_t ldc);

}  // namespace keel::cpu
