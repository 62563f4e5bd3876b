// The choice of grid for a product keel threads itself; see gemm_partition.h.
#include "cpu/gemm_partition.h"

#include <omp.h>

#include <algorithm>

namespace keel::cpu {
namespace {

int64_t units(int64_t extent) { return (extent + kGemmBlockUnit - 1) / kGemmBlockUnit; }

int64_t narrowest_span(int64_t extent, int parts) {
  int64_t narrowest = extent;
  for (int i = 0; i < parts; ++i) {
    const GemmSpan span = gemm_block_span(extent, i, parts);
    narrowest = std::min(narrowest, span.end - span.begin);
  }
  return narrowest;
}

}  // namespace

GemmGrid choose_gemm_grid(int64_t M, int64_t N, int64_t K, int threads) {
  GemmGrid best;
  if (threads <= 1 || M <= 0 || N <= 0 || K <= 0) return best;
  if (static_cast<double>(M) * N * K < 2.0 * kGemmMinBlockMacs) return best;  // not two blocks' worth
  // The most blocks that fit, then the least input packed per thread (ties: fewer row blocks,
  // whose rows of A are the smaller share when N is large).
  for (int count = threads; count > 1; --count) {
    double best_cost = -1.0;
    for (int rows = 1; rows <= count; ++rows) {
      if (count % rows != 0) continue;
      const int cols = count / rows;
      if (rows > units(M) || cols > units(N)) continue;
      if (static_cast<double>(narrowest_span(M, rows)) * narrowest_span(N, cols) * K < kGemmMinBlockMacs) continue;
      const double cost = static_cast<double>(M) / rows * K + static_cast<double>(N) / cols * K;
      if (best_cost < 0.0 || cost < best_cost) {
        best_cost = cost;
        best = GemmGrid{rows, cols};
      }
    }
    if (best_cost >= 0.0) return best;
  }
  return GemmGrid{};
}

GemmSpan gemm_block_span(int64_t extent, int index, int parts) {
  const int64_t total = units(extent);
  const int64_t first = total * index / parts, last = total * (index + 1) / parts;
  return GemmSpan{std::min(extent, first * kGemmBlockUnit), std::min(extent, last * kGemmBlockUnit)};
}

void sgemm_by_blocks(CblasSgemm sgemm, GemmGrid grid, bool transpose_a, bool transpose_b, int64_t M, int64_t N,
                     int64_t K, float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                     float* C, int64_t ldc) {
  const int order_a = transpose_a ? kCblasTrans : kCblasNoTrans, order_b = transpose_b ? kCblasTrans : kCblasNoTrans;
#pragma omp parallel num_threads(grid.blocks())
  // OpenMP may give a smaller team than asked (OMP_THREAD_LIMIT, OMP_DYNAMIC, nested regions
  // switched off): the threads it gives take the blocks in turn, so every block is computed.
  for (int block = omp_get_thread_num(); block < grid.blocks(); block += omp_get_num_threads()) {
    const GemmSpan rows = gemm_block_span(M, block / grid.col_blocks, grid.row_blocks);
    const GemmSpan cols = gemm_block_span(N, block % grid.col_blocks, grid.col_blocks);
    // op(A)'s rows [rows) and op(B)'s columns [cols): where they start depends on the layout.
    const float* A_block = A + (transpose_a ? rows.begin : rows.begin * lda);
    const float* B_block = B + (transpose_b ? cols.begin * ldb : cols.begin);
    if (rows.end > rows.begin && cols.end > cols.begin)
      sgemm(kCblasRowMajor, order_a, order_b, static_cast<int>(rows.end - rows.begin),
            static_cast<int>(cols.end - cols.begin), static_cast<int>(K), alpha, A_block, static_cast<int>(lda),
            B_block, static_cast<int>(ldb), beta, C + rows.begin * ldc + cols.begin, static_cast<int>(ldc));
  }
}

}  // namespace keel::cpu
