// What the cpu backend's source files share: the backend object, the guard every slot runs
// under, the argument checks, and the functions that fill each file's part of the table.
// backend_cpu.cpp holds the config and the fp32 ops of ABI 0.1-0.6; the 0.8 slots live in
// backend_cpu_queue.cpp (queue, events, host memory, convert), backend_cpu_dt.cpp (the ops at an
// element type) and backend_cpu_optimizer.cpp (the fused optimizer updates); the 0.9 slots in
// backend_cpu_llama.cpp (the Llama family's ops), 0.18's in backend_cpu_decode.cpp and 0.19's in
// backend_cpu_moe.cpp (a mixture-of-experts layer's ops) and backend_cpu_block_attention.cpp
// (attention over blocks with document boundaries, rope at given positions).
#pragma once

#include <keel/backend.h>
#include <keel_support/common/abi_guard.hpp>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>

#include "op_profile.hpp"  // defines: OpProfile, count_work

namespace keel_backend_cpu {

using keel_support::StatusError;
constexpr const char* kSource = "backend cpu";

struct CpuBackend {
  const keel_host* host;
  int threads;
  double peak_flops_per_s;
  keel_dtype compute_dtype;  // "precision": fp32 or bf16
  std::unique_ptr<OpProfile> profile = nullptr;  // "op_profile": true; null otherwise
};

inline void require(bool ok, const std::string& what) {
  if (!ok) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, what);
}
inline void require_sizes(std::initializer_list<int64_t> sizes, const char* op) {
  for (int64_t s : sizes) require(s >= 0, std::string(op) + ": negative size " + std::to_string(s));
}

// Runs `body` for the backend object under the ABI guard, timed under the calling slot's name
// when the backend profiles its ops.
template <typename Body>
keel_status run(void* backend, Body&& body, const char* op = __builtin_FUNCTION()) {
  auto* cpu = static_cast<CpuBackend*>(backend);
  const keel_host* host = cpu ? cpu->host : nullptr;
  std::optional<OpProfile::Scope> timed;
  if (cpu && cpu->profile) timed.emplace(cpu->profile.get(), op);
  return keel_support::guard(host, kSource, [&] {
    require(backend != nullptr, "backend handle is NULL");
    body();
  });
}

inline bool is_fp32(keel_dtype t) { return t.code == KEEL_DTYPE_FLOAT && t.bits == 32 && t.lanes == 1; }
inline bool is_bf16(keel_dtype t) { return t.code == KEEL_DTYPE_BFLOAT && t.bits == 16 && t.lanes == 1; }
// "fp32", "bf16", or the tag's fields, for messages.
std::string dtype_name(keel_dtype t);

void require_attention_shape(int64_t B, int64_t T, int64_t C, int64_t NH, const char* op);
// Token ids index memory directly, so a negative one is refused before anything is written.
void require_tokens(const int32_t* tokens, int64_t count, const char* op);
void require_row_block(int64_t begin, int64_t count, const char* op, const char* begin_name, const char* count_name);
void require_column_block(int64_t N, int64_t col_begin, int64_t valid_cols, int64_t cols, const char* op);
void require_copy_direction(int32_t direction, const char* op);

// 64-byte aligned memory of at least `bytes` (a multiple of 64, never 0), not yet zeroed, freed
// with std::free; throws KEEL_ERR_OUT_OF_MEMORY naming `op`. Device and host memory alike.
void* allocate_aligned(size_t bytes, size_t* out_rounded, const char* op);

// Each fills the slots its file defines.
void fill_queue_slots(keel_backend_api& api);
void fill_dt_slots(keel_backend_api& api);
void fill_optimizer_slots(keel_backend_api& api);
void fill_llama_slots(keel_backend_api& api);
void fill_decode_slots(keel_backend_api& api);  // backend_cpu_decode.cpp (0.18)
void fill_moe_slots(keel_backend_api& api);     // backend_cpu_moe.cpp (0.19)
void fill_block_attention_slots(keel_backend_api& api);  // backend_cpu_block_attention.cpp (0.19)
void fill_quant_slots(keel_backend_api& api);            // backend_cpu_quant.cpp (0.19: NF4)
void fill_dropout_slots(keel_backend_api& api);          // backend_cpu_dropout.cpp (0.19: adapter dropout)

}  // namespace keel_backend_cpu
