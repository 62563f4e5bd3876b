// The one way a plugin holds a backend: its table and object, with checked calls so a failing
// backend's own message reaches the caller. Named methods cover what strategies run on flat fp32
// arrays (allocation, copy, zero, scale, accumulate, sum of squares, synchronize); a model's
// compute ops go through KEEL_OP below. Counts are in elements unless a name says bytes;
// zero-length calls do nothing.
#pragma once

#include <keel/backend.h>
#include <keel/plugin.h>

#include <cstdint>
#include <string>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/common/backend_buffer.hpp"

namespace keel_support {

struct BackendOps {
  const keel_backend_api* api = nullptr;
  void* obj = nullptr;

  // Zero-filled (the backend's alloc contract); an empty buffer for n == 0.
  BackendBuffer alloc_floats(int64_t n) const { return BackendBuffer(api, obj, size_t(n) * sizeof(float)); }
  BackendBuffer alloc_bytes(size_t bytes) const { return BackendBuffer(api, obj, bytes); }
  keel_device device() const {
    keel_device out{};
    check_callee(api->device(obj, &out), "backend device");
    return out;
  }
  // For what is not fp32: token ids, a double scalar on its way to a communicator.
  void copy_bytes(void* dst, const void* src, size_t bytes, int32_t direction) const {
    if (bytes > 0) check_callee(api->copy(obj, dst, src, bytes, direction), "backend copy");
  }
  void copy(float* dst, const float* src, int64_t n, int32_t direction = KEEL_COPY_DEVICE_TO_DEVICE) const {
    if (n > 0) check_callee(api->copy(obj, dst, src, size_t(n) * sizeof(float), direction), "backend copy");
  }
  void fill_zero(float* x, int64_t n) const {
    if (n > 0) check_callee(api->fill_zero(obj, x, size_t(n) * sizeof(float)), "backend fill_zero");
  }
  void scale(float* x, float alpha, int64_t n) const {
    if (n > 0) check_callee(api->scale(obj, x, alpha, n), "backend scale");
  }
  void accumulate(float* dst, const float* src, int64_t n) const {
    if (n > 0) check_callee(api->accumulate(obj, dst, src, n), "backend accumulate");
  }
  // Orders the backend's queued work before another thread reads its memory (no-op on the CPU).
  void synchronize() const {
    if (KEEL_HAS_SLOT(api, synchronize)) check_callee(api->synchronize(obj), "backend synchronize");
  }
  double sum_squares(const float* x, int64_t n) const {
    double sum = 0.0;
    if (n > 0) check_callee(api->sum_squares(obj, x, n, &sum), "backend sum_squares");
    return sum;
  }
};

}  // namespace keel_support

// KEEL_OP(backend, matmul_forward, out, inp, ...) calls one op of a BackendOps's table and throws
// CalleeFailed, which keeps the backend's own message, naming the op when it fails. A macro, not
// a method per op: the backend table has dozens of compute ops, and the op's name is needed both
// as the slot and in the message. The optional ones (0.18's decode, 0.19's moe_* and grouped_matmul_*)
// are asked for at create with KEEL_REQUIRE_BACKEND_OP, then called the same way:
//   KEEL_OP(backend, moe_permute_plan, positions, counts_host, experts, N, E, K);
#define KEEL_OP(backend, op, ...) \
  ::keel_support::check_callee((backend).api->op((backend).obj, __VA_ARGS__), "backend op " #op)

// In a plugin's create: refuses a backend table without slot `op` (KEEL_ERR_UNIMPLEMENTED),
// naming the op and who needs it (`who`: "the gpt model"), so a missing op fails at start-up rather
// than in the middle of a step.
#define KEEL_REQUIRE_BACKEND_OP(table, op, who)                                                       \
  if (!KEEL_HAS_SLOT(table, op))                                                                      \
  throw ::keel_support::StatusError(KEEL_ERR_UNIMPLEMENTED,                                           \
                                    std::string("the backend does not implement " #op ", which ") + \
                                        (who) + " needs")
