// The argument checks of backend.h's 0.19 attention over blocks and rope at given positions, one
// definition for every backend: sizes, head counts, row strides wide enough for their heads, the
// pointers each direction needs. Each throws StatusError (KEEL_ERR_INVALID_ARGUMENT) naming the op.
#pragma once

#include <keel/backend.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "keel_support/common/abi_guard.hpp"

namespace keel_support {

// `max_head_size`: the largest hs the backend runs (0: any).
inline const keel_attention_args& check_attention_args(const keel_attention_args* args, bool backward, const char* op,
                                                       int64_t max_head_size = 0) {
  auto require = [&](bool ok, const std::string& what) {
    if (!ok) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + what);
  };
  require(args != nullptr, "args is NULL");
  require(args->struct_size >= offsetof(keel_attention_args, dkv) + sizeof(void*),
          "args->struct_size " + std::to_string(args->struct_size) + " is smaller than keel_attention_args (0.19)");
  const keel_attention_args& a = *args;
  for (int64_t size : {a.B, a.Tq, a.Tkv, a.q_stride, a.kv_stride, a.out_stride})
    require(size >= 0, "negative size " + std::to_string(size));
  require(a.hs > 0 && (max_head_size == 0 || a.hs <= max_head_size) && a.NKV > 0 && a.NH > 0 && a.NH % a.NKV == 0,
          "need hs > 0" + (max_head_size ? " (at most " + std::to_string(max_head_size) + ")" : std::string()) +
              " and NH a positive multiple of NKV, found NH " + std::to_string(a.NH) + ", NKV " +
              std::to_string(a.NKV) + ", hs " + std::to_string(a.hs));
  require(a.q_stride >= a.NH * a.hs && a.out_stride >= a.NH * a.hs && a.kv_stride >= 2 * a.NKV * a.hs,
          "a row stride is narrower than the heads it holds (q " + std::to_string(a.q_stride) + ", kv " +
              std::to_string(a.kv_stride) + ", out " + std::to_string(a.out_stride) + ")");
  require(a.q && a.kv && a.out && a.lse, "q, kv, out and lse are required");
  if (backward) require(a.dout && a.dq && a.dkv, "dout, dq and dkv are required");
  return a;
}

// rope_at_*: the rows' turned heads fit their stride, and positions are given.
inline void check_rope_at(const int32_t* positions, int64_t B, int64_t T, int64_t heads, int64_t head_dim,
                          int64_t stride, int64_t first, const char* op) {
  auto require = [&](bool ok, const std::string& what) {
    if (!ok) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + what);
  };
  for (int64_t size : {B, T, heads, head_dim, stride, first}) require(size >= 0, "negative size " + std::to_string(size));
  require(positions != nullptr || B * T == 0, "positions is NULL");
  require(head_dim % 2 == 0, "head_dim " + std::to_string(head_dim) + " is odd");
  require(first + heads * head_dim <= stride, "heads end at column " + std::to_string(first + heads * head_dim) +
                                                  ", past the row stride " + std::to_string(stride));
}

}  // namespace keel_support
