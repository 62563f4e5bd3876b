// The cpu backend's 0.19 dropout (LoRA's adapter dropout, backend.h dropout_dt): the mask of
// keel_support/common/dropout_mask.hpp, parallel over rows, scaled in fp32 and rounded to bf16
// once at that compute type.
#include <cmath>
#include <cstdint>
#include <string>

#include <keel_support/backend/backend_slots.hpp>    // defines: KEEL_FILL_BACKEND_SLOTS
#include <keel_support/common/dropout_mask.hpp>      // defines: dropout_keeps

#include "backend_cpu.hpp"     // defines: run, require*
#include "backend_cpu_dt.hpp"  // defines: bf16_storage, Fp32Input, Fp32Output

namespace keel_backend_cpu {
namespace {

keel_status dropout_dt(void* backend, keel_dtype dt, void* out, const void* inp, int64_t rows, int64_t cols,
                       int64_t col_offset, uint64_t seed, float p) {
  return run(backend, [&] {
    require_sizes({rows, cols, col_offset}, "dropout_dt");
    require(p >= 0.0f && p < 1.0f, "dropout_dt: p " + std::to_string(p) + " is outside [0, 1)");
    require(rows < (int64_t(1) << 32) && col_offset + cols <= (int64_t(1) << 32),
            "dropout_dt: rows and col_offset + cols must stay below 2^32");
    require(rows * cols == 0 || (out && inp), "dropout_dt: a pointer is NULL");
    const bool bf = bf16_storage(dt, "dropout_dt");
    const Fp32Input x(bf, inp, rows * cols);
    const Fp32Output y(bf, out, rows * cols, kWrite);
    const float scale = float(1.0 / (1.0 - double(p)));
#pragma omp parallel for if (rows * cols > (1 << 16))
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = r * cols + c;
        y.get()[i] = keel_support::dropout_keeps(seed, uint64_t(r), uint64_t(col_offset + c), p) ? x.get()[i] * scale
                                                                                                 : 0.0f;
      }
    y.store();
  });
}

}  // namespace

void fill_dropout_slots(keel_backend_api& api) { KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_DROPOUT_SLOTS_0_19); }

}  // namespace keel_backend_cpu
