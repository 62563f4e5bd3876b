// The cuda backend's 0.19 dropout (LoRA's adapter dropout, backend.h dropout_dt) over
// kernels/cuda/dropout.cu: the same hashed mask as the cpu's, element for element.
#include <keel_support/backend/backend_slots.hpp>

#include <string>

#include "backend_cuda.hpp"  // defines: CudaBackend, run, require, elem_of

namespace keel_cuda {
namespace {

keel_status dropout_dt(void* backend, keel_dtype dt, void* out, const void* inp, int64_t rows, int64_t cols,
                       int64_t col_offset, uint64_t seed, float p) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "dropout");
    require_sizes({rows, cols, col_offset}, "dropout");
    require(p >= 0.0f && p < 1.0f, "dropout: p " + std::to_string(p) + " is outside [0, 1)");
    require(rows < (int64_t(1) << 32) && col_offset + cols <= (int64_t(1) << 32),
            "dropout: rows and col_offset + cols must stay below 2^32");
    keel::cuda::dropout(e, out, inp, rows, cols, col_offset, seed, p, b.stream);
    launched("dropout");
  });
}

}  // namespace

void fill_dropout_slots(keel_backend_api& api) { KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_DROPOUT_SLOTS_0_19); }

}  // namespace keel_cuda
