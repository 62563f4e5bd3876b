// The choice of grid for a product keel threads itself; see gemm_partition.h.
#include "cpu/gemm_partition.h"

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
  // The most blocks that fit, then the least input packed per thread (ties: fewer row blocks,
  // whose rows of A are the smaller share when N is large).
  for (int count = threads; count > 1; --count) {
    double best_cost = -1.0;
    for (int rows = 1; rows <= count; ++rows) {
      if (count % rows != 0) continue;
      const int cols = count / rows;
      if (rows > units(M) || cols > units(N)) continue;
      if (narrowest_span(M, rows) * narrowest_span(N, cols) * K < kGemmMinBlockMacs) continue;
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

}  // namespace keel::cpu
