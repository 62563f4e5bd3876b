// The cpu backend's 0.19 NF4 dequantization (QLoRA's frozen base, params.h KEEL_PARAM_NF4): the
// layout and table of keel_support/common/nf4.hpp, parallel over blocks, rounded to bf16 once at
// that compute type.
#include <algorithm>
#include <cstdint>
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

}  // namespace

void fill_quant_slots(keel_backend_api& api) { KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_QUANT_SLOTS_0_19); }

}  // namespace keel_backend_cpu
