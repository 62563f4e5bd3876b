// The residual stream's elementwise ops: add (forward), accumulate (gradient fan-in), scale,
// and zero_fill for the gradient buffers cleared before every step.
#pragma once

#include <cstddef>
#include <cstdint>

namespace keel::cpu {

// out = a + b; out may alias a or b.
void add(float* out, const float* a, const float* b, int64_t n);  // all (n)
// dst += src
void accumulate(float* dst, const float* src, int64_t n);  // all (n)
// x *= alpha
void scale(float* x, float alpha, int64_t n);  // (n)
// ptr[0..bytes) = 0, split over threads when large (zeroing 500 MB of gradients is memory-bound).
void zero_fill(void* ptr, size_t bytes);

}  // namespace keel::cpu
