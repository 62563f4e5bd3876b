// sum_squares: a parallel, vectorised double-precision reduction (static schedule, so the
// result is the same on every call with the same thread count).
#include "cpu/reduce.h"

#include "cpu/parallel_threshold.h"

namespace keel::cpu {

double sum_squares(const float* x, int64_t n) {
  double sum = 0.0;
#pragma omp parallel for simd reduction(+ : sum) schedule(static) if (n > keel::cpu::kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    sum += v * v;
  }
  return sum;
}

}  // namespace keel::cpu
