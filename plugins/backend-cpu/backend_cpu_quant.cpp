// The cpu backend's 0.19 quantization ops: NF4 dequantization (QLoRA's frozen base, params.h
// KEEL_PARAM_NF4: the layout and table of keel_support/common/nf4.hpp, parallel over blocks) and
// quantization-aware training's fake quantization (torchao's symmetric per-group rule for weights,
// its per-token asymmetric one for activations), each rounded to bf16 once at that compute type.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include <keel_support/backend/backend_slots.hpp>  // defines: KEEL_FILL_BACKEND_SLOTS
#include <keel_support/common/nf4.hpp>             // defines: nf4_dequantize, kNf4Block

#include "backend_cpu.hpp"     // defines: run, require*
#include "backend_cpu_dt.hpp"  // defines: bf16_storage, Fp32Output

namespace keel_backend_cpu {
namespace {

keel_status nf4_dequantize_dt(void* backend, keel_dtype dt, void* out, const uint8_t* codes, const int8_t* block_scales,
                              const float* scale_factors, float scale_mean, int64_t n) {
  return run(backend, [&] {
    require_sizes({n}, "nf4_dequantize_dt");
    require(n == 0 || (out && codes && block_scales && scale_factors), "nf4_dequantize_dt: a pointer is NULL");
    const Fp32Output y(bf16_storage(dt, "nf4_dequantize_dt"), out, n, kWrite);
    const int64_t blocks = keel_support::nf4_blocks(n), block = keel_support::kNf4Block;
    float* values = y.get();
#pragma omp parallel for if (blocks > 64)
    for (int64_t b = 0; b < blocks; ++b)
      keel_support::nf4_dequantize(values + b * block, codes, block_scales, scale_factors, scale_mean, b * block,
                                   std::min(n, (b + 1) * block));
    y.store();
  });
}

// One group: scale from its largest magnitude, then round, clamp and scale back (in place).
void fake_quantize_group(float* x, int64_t n, int32_t bits) {
  const float qmin = -std::ldexp(1.0f, bits - 1), qmax = std::ldexp(1.0f, bits - 1) - 1.0f;
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float scale = std::max(amax / ((qmax - qmin) / 2.0f), std::numeric_limits<float>::epsilon());
  const float inverse = 1.0f / scale;  // torchao's quantize_affine multiplies by the reciprocal
  for (int64_t i = 0; i < n; ++i) x[i] = std::clamp(std::nearbyint(x[i] * inverse), qmin, qmax) * scale;
}

keel_status fake_quantize_dt(void* backend, keel_dtype dt, void* out, const void* inp, int64_t rows, int64_t cols,
                             int64_t group, int32_t bits) {
  return run(backend, [&] {
    require_sizes({rows, cols}, "fake_quantize_dt");
    require(group > 0 && cols % group == 0, "fake_quantize_dt: group " + std::to_string(group) +
                                                " does not divide the row of " + std::to_string(cols) + " columns");
    require(bits >= 2 && bits <= 8, "fake_quantize_dt: bits " + std::to_string(bits) + " is outside 2..8");
    require(rows * cols == 0 || (out && inp), "fake_quantize_dt: a pointer is NULL");
    const bool bf = bf16_storage(dt, "fake_quantize_dt");
    const Fp32Input x(bf, inp, rows * cols);
    const Fp32Output y(bf, out, rows * cols, kWrite);
    if (y.get() != x.get()) std::copy(x.get(), x.get() + rows * cols, y.get());
    const int64_t groups = rows * cols / group;
#pragma omp parallel for if (groups > 256)
    for (int64_t g = 0; g < groups; ++g) fake_quantize_group(y.get() + g * group, group, bits);
    y.store();
  });
}

// One row of activations, torchao's per-token asymmetric rule (backend.h fake_quantize_tokens_dt).
void fake_quantize_token(float* x, int64_t n, int32_t bits) {
  const float qmin = -std::ldexp(1.0f, bits - 1), qmax = std::ldexp(1.0f, bits - 1) - 1.0f;
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  const float scale = std::max((hi - lo) / (qmax - qmin), std::numeric_limits<float>::epsilon());
  const float from_lo = lo / scale, from_hi = hi / scale;
  const float z = (qmin + from_lo) + (qmax + from_hi) > 0.0f ? qmin - from_lo : qmax - from_hi;
  const float zero = std::nearbyint(std::clamp(z, qmin, qmax));
  const float inverse = 1.0f / scale;
  for (int64_t i = 0; i < n; ++i)
    x[i] = (std::clamp(std::nearbyint(x[i] * inverse) + zero, qmin, qmax) - zero) * scale;
}

keel_status fake_quantize_tokens_dt(void* backend, keel_dtype dt, void* out, const void* inp, int64_t rows,
                                    int64_t cols, int32_t bits) {
  return run(backend, [&] {
    require_sizes({rows, cols}, "fake_quantize_tokens_dt");
    require(bits >= 2 && bits <= 8, "fake_quantize_tokens_dt: bits " + std::to_string(bits) + " is outside 2..8");
    require(rows * cols == 0 || (out && inp), "fake_quantize_tokens_dt: a pointer is NULL");
    const bool bf = bf16_storage(dt, "fake_quantize_tokens_dt");
    const Fp32Input x(bf, inp, rows * cols);
    const Fp32Output y(bf, out, rows * cols, kWrite);
    if (y.get() != x.get()) std::copy(x.get(), x.get() + rows * cols, y.get());
#pragma omp parallel for if (rows * cols > (1 << 16))
    for (int64_t r = 0; r < rows; ++r) fake_quantize_token(y.get() + r * cols, cols, bits);
    y.store();
  });
}

}  // namespace

void fill_quant_slots(keel_backend_api& api) { KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_QUANT_SLOTS_0_19); }

}  // namespace keel_backend_cpu
