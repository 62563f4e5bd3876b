// Quantization-aware training's fake quantization on the gpu (keel/backend.h fake_quantize_dt):
// a warp per group of columns takes the group's largest magnitude with a butterfly, then each lane
// rounds, clamps and scales back its elements; round-half-even and the scale's floor as the cpu's.
#include <cfloat>

#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace keel::cuda {
namespace {

constexpr int kGroupWarps = 8;

template <typename E>
__global__ void fake_quantize_kernel(E* out, const E* inp, int64_t groups, int64_t group, float qmin, float qmax) {
  const int lane = threadIdx.x % 32;
  const int64_t g = int64_t(blockIdx.x) * kGroupWarps + threadIdx.x / 32;
  if (g >= groups) return;  // uniform over the warp
  const E* x = inp + g * group;
  E* y = out + g * group;
  float amax = 0.0f;
  for (int64_t i = lane; i < group; i += 32) amax = fmaxf(amax, fabsf(load(x + i)));
  amax = warp_max(amax);
  const float scale = fmaxf(amax / ((qmax - qmin) / 2.0f), FLT_EPSILON), inverse = 1.0f / scale;
  for (int64_t i = lane; i < group; i += 32)
    store(y + i, fminf(fmaxf(rintf(load(x + i) * inverse), qmin), qmax) * scale);
}

// Activations (fake_quantize_tokens_dt): a warp per row takes its least and largest value, then
// each lane quantizes its elements against the row's scale and zero point.
template <typename E>
__global__ void fake_quantize_tokens_kernel(E* out, const E* inp, int64_t rows, int64_t cols, float qmin, float qmax) {
  const int lane = threadIdx.x % 32;
  const int64_t r = int64_t(blockIdx.x) * kGroupWarps + threadIdx.x / 32;
  if (r >= rows) return;  // uniform over the warp
  const E* x = inp + r * cols;
  E* y = out + r * cols;
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = lane; i < cols; i += 32) {
    const float v = load(x + i);
    lo = fminf(lo, v);
    hi = fmaxf(hi, v);
  }
  lo = -warp_max(-lo);
  hi = warp_max(hi);
  const float scale = fmaxf((hi - lo) / (qmax - qmin), FLT_EPSILON);
  const float from_lo = lo / scale, from_hi = hi / scale;
  const float z = (qmin + from_lo) + (qmax + from_hi) > 0.0f ? qmin - from_lo : qmax - from_hi;
  const float zero = rintf(fminf(fmaxf(z, qmin), qmax));
  const float inverse = 1.0f / scale;
  for (int64_t i = lane; i < cols; i += 32)
    store(y + i, (fminf(fmaxf(rintf(load(x + i) * inverse) + zero, qmin), qmax) - zero) * scale);
}

}  // namespace

void fake_quantize_tokens(Elem e, void* out, const void* inp, int64_t rows, int64_t cols, int bits,
                          cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const float qmin = -float(1 << (bits - 1)), qmax = float((1 << (bits - 1)) - 1);
  const unsigned blocks = unsigned((rows + kGroupWarps - 1) / kGroupWarps);
  if (e == Elem::bf16)
    fake_quantize_tokens_kernel<<<blocks, 32 * kGroupWarps, 0, stream>>>(
        static_cast<bf16*>(out), static_cast<const bf16*>(inp), rows, cols, qmin, qmax);
  else
    fake_quantize_tokens_kernel<<<blocks, 32 * kGroupWarps, 0, stream>>>(
        static_cast<float*>(out), static_cast<const float*>(inp), rows, cols, qmin, qmax);
}

void fake_quantize(Elem e, void* out, const void* inp, int64_t rows, int64_t cols, int64_t group, int bits,
                   cudaStream_t stream) {
  const int64_t groups = rows * cols / group;
  if (groups <= 0) return;
  const float qmin = -float(1 << (bits - 1)), qmax = float((1 << (bits - 1)) - 1);
  const unsigned blocks = unsigned((groups + kGroupWarps - 1) / kGroupWarps);
  if (e == Elem::bf16)
    fake_quantize_kernel<<<blocks, 32 * kGroupWarps, 0, stream>>>(static_cast<bf16*>(out), static_cast<const bf16*>(inp),
                                                                  groups, group, qmin, qmax);
  else
    fake_quantize_kernel<<<blocks, 32 * kGroupWarps, 0, stream>>>(static_cast<float*>(out),
                                                                  static_cast<const float*>(inp), groups, group, qmin,
                                                                  qmax);
}

}  // namespace keel::cuda
