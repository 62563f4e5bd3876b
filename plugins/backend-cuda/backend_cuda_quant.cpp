// The cuda backend's 0.19 quantization ops: NF4 dequantization (QLoRA's frozen base) over
// kernels/cuda/nf4.cu with the table of keel_support/common/nf4.hpp, and quantization-aware
// training's fake quantization over kernels/cuda/fake_quantize.cu.
#include <keel_support/backend/backend_slots.hpp>
#include <keel_support/common/nf4.hpp>

#include <algorithm>
#include <string>

#include "backend_cuda.hpp"  // defines: CudaBackend, run, require, elem_of

namespace keel_cuda {
namespace {

keel_status nf4_dequantize_dt(void* backend, keel_dtype dt, void* out, const uint8_t* codes, const int8_t* block_scales,
                              const float* scale_factors, float scale_mean, int64_t n) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "nf4_dequantize");
    require_sizes({n}, "nf4_dequantize");
    keel::cuda::Nf4Table table{};
    std::copy(std::begin(keel_support::kNf4Table), std::end(keel_support::kNf4Table), table.values);
    keel::cuda::nf4_dequantize(e, out, codes, block_scales, scale_factors, scale_mean, table, n, b.stream);
    launched("nf4_dequantize");
  });
}

keel_status fake_quantize_dt(void* backend, keel_dtype dt, void* out, const void* inp, int64_t rows, int64_t cols,
                             int64_t group, int32_t bits) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "fake_quantize");
    require_sizes({rows, cols}, "fake_quantize");
    require(group > 0 && cols % group == 0, "fake_quantize: group " + std::to_string(group) +
                                                " does not divide the row of " + std::to_string(cols) + " columns");
    require(bits >= 2 && bits <= 8, "fake_quantize: bits " + std::to_string(bits) + " is outside 2..8");
    keel::cuda::fake_quantize(e, out, inp, rows, cols, group, bits, b.stream);
    launched("fake_quantize");
  });
}

keel_status fake_quantize_tokens_dt(void* backend, keel_dtype dt, void* out, const void* inp, int64_t rows,
                                    int64_t cols, int32_t bits) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "fake_quantize_tokens");
    require_sizes({rows, cols}, "fake_quantize_tokens");
    require(bits >= 2 && bits <= 8, "fake_quantize_tokens: bits " + std::to_string(bits) + " is outside 2..8");
    keel::cuda::fake_quantize_tokens(e, out, inp, rows, cols, bits, b.stream);
    launched("fake_quantize_tokens");
  });
}

}  // namespace

void fill_quant_slots(keel_backend_api& api) { KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_QUANT_SLOTS_0_19); }

}  // namespace keel_cuda
