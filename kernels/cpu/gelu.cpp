// GELU forward/backward, elementwise, 8 lanes at a time (tanh from vecmath.h), threads over
// blocks of kGeluBlock floats.
#include "cpu/gelu.h"

#include "cpu/parallel_threshold.h"

#include <algorithm>

#include "cpu/vecmath.h"

namespace keel::cpu {

namespace {
constexpr float kGeluScaling = 0.7978845608028654f;  // sqrt(2/π)
constexpr float kCubic = 0.044715f;
constexpr int64_t kGeluBlock = keel::cpu::kParallelMinElementsHeavy;  // per thread task; smaller arrays stay on one thread

f32x8 gelu8(f32x8 x) { return 0.5f * x * (1.0f + tanh8(kGeluScaling * (x + kCubic * x * x * x))); }

// d gelu / dx = 0.5(1 + tanh u) + 0.5 x (1 - tanh² u) u',  u = s(x + 0.044715 x³)
f32x8 gelu_grad8(f32x8 x) {
  const f32x8 th = tanh8(kGeluScaling * (x + kCubic * x * x * x));
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kGeluScaling * (1.0f + 3.0f * kCubic * x * x);
}
}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
  const int64_t blocks = (n + kGeluBlock - 1) / kGeluBlock;
#pragma omp parallel for if (blocks > 1)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t end = std::min(n, (block + 1) * kGeluBlock);
    int64_t i = block * kGeluBlock;
    for (; i + 8 <= end; i += 8) store8(out + i, gelu8(load8(inp + i)));
    if (i < end) store_partial8(out + i, gelu8(load_partial8(inp + i, end - i, 0.0f)), end - i);
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  const int64_t blocks = (n + kGeluBlock - 1) / kGeluBlock;
#pragma omp parallel for if (blocks > 1)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t end = std::min(n, (block + 1) * kGeluBlock);
    int64_t i = block * kGeluBlock;
    for (; i + 8 <= end; i += 8)
      store8(dinp + i, load8(dinp + i) + gelu_grad8(load8(inp + i)) * load8(dout + i));
    if (i < end) {
      const int64_t m = end - i;
      const f32x8 d = load_partial8(dinp + i, m, 0.0f) +
                      gelu_grad8(load_partial8(inp + i, m, 0.0f)) * load_partial8(dout + i, m, 0.0f);
      store_partial8(dinp + i, d, m);
    }
  }
}

}  // namespace keel::cpu
