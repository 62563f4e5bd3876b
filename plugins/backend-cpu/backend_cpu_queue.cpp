// The cpu backend's ABI 0.8 plumbing: probe, compute type, queue, events, host staging memory,
// copy_async and convert. The cpu runs every op as it is called, so there is no queue to hand
// out and an event has always passed: recording, waiting and synchronising only check the
// handle. Host memory is ordinary aligned memory (nothing to pin), and copy_async is a copy.
#include <cstdlib>
#include <cstring>
#include <string>

#include <keel_support/backend/backend_slots.hpp>  // defines: KEEL_FILL_BACKEND_SLOTS

#include "backend_cpu.hpp"  // defines: CpuBackend, run, require*
#include "cpu/bf16.h"       // defines: widen_bf16, round_to_bf16

namespace keel_backend_cpu {
namespace {

// An event of a backend that runs ops as they are called: it carries nothing, but is a real
// object so a caller's handle can be told from NULL and destroyed.
struct CpuEvent {
  int unused = 0;
};

keel_status probe(const keel_host*) { return KEEL_OK; }  // any machine that loaded the plugin runs it

keel_status compute_dtype(void* backend, keel_dtype* out_dtype) {
  return run(backend, [&] {
    require(out_dtype != nullptr, "compute_dtype: out_dtype is NULL");
    *out_dtype = static_cast<CpuBackend*>(backend)->compute_dtype;
  });
}

keel_status queue(void* backend, void** out_queue) {
  return run(backend, [&] {
    require(out_queue != nullptr, "queue: out_queue is NULL");
    *out_queue = nullptr;  // ops run as they are called
  });
}

keel_status event_create(void* backend, void** out_event) {
  return run(backend, [&] {
    require(out_event != nullptr, "event_create: out_event is NULL");
    *out_event = new CpuEvent;
  });
}

void event_destroy(void* backend, void* event) {
  run(backend, [&] { delete static_cast<CpuEvent*>(event); });
}

keel_status event_record(void* backend, void* event) {
  return run(backend, [&] { require(event != nullptr, "event_record: event is NULL"); });
}

keel_status event_wait(void* backend, void* event) {
  return run(backend, [&] { require(event != nullptr, "event_wait: event is NULL"); });
}

keel_status event_synchronize(void* backend, void* event) {
  return run(backend, [&] { require(event != nullptr, "event_synchronize: event is NULL"); });
}

// Zeroed with memset rather than the kernels' threaded zero_fill: a communication thread may
// call this while the training thread runs OpenMP regions.
keel_status alloc_host(void* backend, size_t bytes, void** out_ptr) {
  return run(backend, [&] {
    require(out_ptr != nullptr, "alloc_host: out_ptr is NULL");
    size_t rounded = 0;
    void* ptr = allocate_aligned(bytes, &rounded, "alloc_host");
    std::memset(ptr, 0, rounded);
    *out_ptr = ptr;
  });
}

void free_host(void* backend, void* ptr) {
  run(backend, [&] { std::free(ptr); });
}

keel_status copy_async(void* backend, void* dst, const void* src, size_t bytes, int32_t direction) {
  return run(backend, [&] {
    require_copy_direction(direction, "copy_async");
    require(bytes == 0 || (dst && src), "copy_async: NULL pointer");
    if (bytes) std::memcpy(dst, src, bytes);  // done when it returns: every later event has passed
  });
}

keel_status convert(void* backend, void* dst, keel_dtype dst_dtype, const void* src, keel_dtype src_dtype,
                    int64_t n) {
  return run(backend, [&] {
    require_sizes({n}, "convert");
    require(n == 0 || (dst && src), "convert: NULL pointer");
    const bool dst_ok = is_fp32(dst_dtype) || is_bf16(dst_dtype), src_ok = is_fp32(src_dtype) || is_bf16(src_dtype);
    if (!dst_ok || !src_ok)
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, "convert: the cpu backend converts between fp32 and bf16, not " +
                                                    dtype_name(src_dtype) + " to " + dtype_name(dst_dtype));
    if (n == 0) return;
    if (is_fp32(src_dtype) && is_bf16(dst_dtype))
      keel::cpu::round_to_bf16(static_cast<keel::cpu::bf16*>(dst), static_cast<const float*>(src), n);
    else if (is_bf16(src_dtype) && is_fp32(dst_dtype))
      keel::cpu::widen_bf16(static_cast<float*>(dst), static_cast<const keel::cpu::bf16*>(src), n);
    else
      std::memmove(dst, src, static_cast<size_t>(n) * (is_fp32(src_dtype) ? 4 : 2));
  });
}

}  // namespace

void fill_queue_slots(keel_backend_api& api) { KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_QUEUE_SLOTS_0_8); }

}  // namespace keel_backend_cpu
