// Fully connected layer forward/backward: three sgemm calls plus a bias fill and a column sum.
#include "cpu/matmul.h"

#include "cpu/parallel_threshold.h"

#include <algorithm>
#include <cstring>

#include "cpu/blas.h"

namespace keel::cpu {

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t N, int64_t IC, int64_t OC) {
  if (N == 0 || OC == 0) return;
  float beta = 0.0f;
  if (bias) {
    // Start from the bias and let sgemm add into it: one pass over `out` instead of two.
#pragma omp parallel for if (N * OC > keel::cpu::kParallelMinElements)
    for (int64_t n = 0; n < N; ++n) std::memcpy(out + n * OC, bias, OC * sizeof(float));
    beta = 1.0f;
  }
  if (IC == 0) {
    if (!bias) std::memset(out, 0, N * OC * sizeof(float));
    return;
  }
  sgemm(false, true, N, OC, IC, 1.0f, inp, IC, weight, IC, beta, out, OC);
}

// dbias(OC) += Σ_n dout(N,OC): each thread owns a slice of columns and walks every row, so
// there is no reduction across threads and the order of additions is fixed.
static void bias_backward(float* dbias, const float* dout, int64_t N, int64_t OC) {
  constexpr int64_t kColumns = 64;
  const int64_t blocks = (OC + kColumns - 1) / kColumns;
#pragma omp parallel for if (N * OC > keel::cpu::kParallelMinElements)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t o0 = block * kColumns, width = std::min(kColumns, OC - o0);
    float sum[kColumns] = {};
    for (int64_t n = 0; n < N; ++n) {
      const float* row = dout + n * OC + o0;
#pragma omp simd
      for (int64_t o = 0; o < width; ++o) sum[o] += row[o];
    }
    for (int64_t o = 0; o < width; ++o) dbias[o0 + o] += sum[o];
  }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t IC, int64_t OC) {
  if (N == 0) return;
  if (dinp && OC > 0) sgemm(false, false, N, IC, OC, 1.0f, dout, OC, weight, IC, 1.0f, dinp, IC);
  if (dweight && N > 0) sgemm(true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
  if (dbias) bias_backward(dbias, dout, N, OC);
}

}  // namespace keel::cpu
