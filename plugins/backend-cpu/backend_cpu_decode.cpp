// The 0.18 slot for generating with a key/value cache: attention of the new positions over the
// cached ones (kernels/cpu/attention.h attention_decode). fp32 only: a bf16 cache would be
// widened whole at every token, so a bf16 run generates by running the whole window instead.
#include <keel/backend.h>

#include <cstdint>
#include <string>

#include <keel_support/backend/backend_slots.hpp>  // defines: KEEL_FILL_BACKEND_SLOTS

#include "backend_cpu.hpp"     // defines: run, require*
#include "backend_cpu_dt.hpp"  // defines: bf16_storage
#include "cpu/attention.h"     // defines: attention_decode

namespace keel_backend_cpu {
namespace {

keel_status attention_decode_dt(void* backend, keel_dtype dt, void* out, void* k_cache, void* v_cache,
                                const void* qkv, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                                int64_t past, int64_t capacity) {
  return run(backend, [&] {
    require_attention_shape(B, T, C, NH, "attention_decode_dt");
    require(NKV > 0 && NH % NKV == 0, "attention_decode_dt: NH = " + std::to_string(NH) +
                                          " must be a positive multiple of NKV = " + std::to_string(NKV));
    require(out && k_cache && v_cache && qkv, "attention_decode_dt: NULL buffer");
    require(past >= 0 && past + T <= capacity, "attention_decode_dt: " + std::to_string(past) + " cached and " +
                                                   std::to_string(T) + " new positions do not fit a cache of " +
                                                   std::to_string(capacity));
    if (bf16_storage(dt, "attention_decode_dt"))
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, "attention_decode_dt: the cpu backend keeps a key/value cache at fp32 only");
    const int64_t L = past + T;
    count_work(4.0 * B * T * L * C, 4.0 * (B * T * (2 * C + 2 * NKV * (C / NH)) + 2 * B * L * NKV * (C / NH)));
    keel::cpu::attention_decode(static_cast<float*>(out), static_cast<float*>(k_cache), static_cast<float*>(v_cache),
                                static_cast<const float*>(qkv), B, T, C, NH, NKV, past, capacity);
  });
}

}  // namespace

void fill_decode_slots(keel_backend_api& api) { KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_SLOTS_0_18); }

}  // namespace keel_backend_cpu
