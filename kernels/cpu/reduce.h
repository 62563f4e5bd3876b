// Reductions: the sum of squares behind gradient-norm clipping.
#pragma once

#include <cstdint>

namespace keel::cpu {

// Σ x[i]², accumulated in double: a 124M-element gradient summed in float loses digits.
double sum_squares(const float* x,  // (n)
                   int64_t n);

}  // namespace keel::cpu
