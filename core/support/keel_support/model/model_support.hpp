// What a hand-written model needs besides its math and its layer leases: parameter specs filled
// the way every model fills them, describe's answer, token ids checked before a kernel indexes
// with them, and the mean loss read back from backend memory. Used by the gpt and mlp plugins and installed for
// third-party models.
#pragma once

#include <keel/backend.h>
#include <keel/model.h>
#include <keel/params.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/common/backend_ops.hpp"
#include "keel_support/common/sized_output.hpp"

namespace keel_support {

// The mean cross-entropy over the valid targets from the per-position losses in backend memory
// (ignored targets hold 0); with no valid target the mean is empty and the loss is 0.
inline float mean_loss(const BackendOps& backend, const float* device_losses, int64_t n, int64_t valid_targets) {
  std::vector<float> losses(static_cast<size_t>(n));
  backend.copy(losses.data(), device_losses, n, KEEL_COPY_DEVICE_TO_HOST);
  double sum = 0;
  for (float x : losses) sum += x;
  return valid_targets ? static_cast<float>(sum / static_cast<double>(valid_targets)) : 0.0f;
}

// A model that computes in fp32 only refuses a backend configured for another compute type
// (backend.h compute_dtype, 0.8) rather than train in fp32 while the config says otherwise.
inline void require_fp32_compute(const BackendOps& backend, const char* who) {
  if (!KEEL_HAS_SLOT(backend.api, compute_dtype)) return;  // before 0.8 every backend is fp32
  keel_dtype dtype{};
  check_callee(backend.api->compute_dtype(backend.obj, &dtype), "backend compute_dtype");
  if (dtype.code != KEEL_DTYPE_FLOAT || dtype.bits != 32)
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string(who) + " computes in fp32 only so far; the backend is "
                                                  "configured for " + (dtype.code == KEEL_DTYPE_BFLOAT ? "bf16" : "another type") +
                                                  " (backend.precision): set it to \"fp32\"");
}

// describe's answer, written up to the caller's struct_size. n_blocks: the repeated blocks a
// pipeline may split (0: the model cannot run as pipeline chunks).
// `splits_sequences`: the model honours model.h's cp_* (context parallelism).
inline void write_model_info(keel_model_info* out, const std::vector<keel_param_spec>& specs, int32_t n_layers,
                             int32_t vocab_size, int32_t padded_vocab_size, int32_t max_seq_len, int32_t n_blocks = 0,
                             bool splits_sequences = false) {
  keel_model_info info{};
  info.struct_size = sizeof info;
  info.params = specs.data();
  info.n_params = specs.size();
  info.n_layers = n_layers;
  info.vocab_size = vocab_size;
  info.padded_vocab_size = padded_vocab_size;
  info.max_seq_len = max_seq_len;
  info.n_blocks = n_blocks;
  info.splits_sequences = splits_sequences ? 1 : 0;
  write_sized_output(out, info, sizeof info, "describe: out_info");
}

// Fills a spec with the fields every model sets the same way (replicated, local = global).
inline keel_param_spec make_spec(const char* name, int32_t layer, std::initializer_list<int64_t> shape,
                                 uint32_t flags, int32_t init, float init_std, int64_t init_rows = -1) {
  keel_param_spec s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  s.name = name;
  s.layer = layer;
  s.ndim = static_cast<int32_t>(shape.size());
  int d = 0;
  for (int64_t extent : shape) s.global_shape[d] = s.local_shape[d] = extent, ++d;
  s.tp_dim = -1;
  s.flags = flags;
  s.init = init;
  s.init_std = init_std;
  s.init_rows = init_rows;
  return s;
}

inline int64_t element_count(const keel_param_spec& s) {
  int64_t n = 1;
  for (int d = 0; d < s.ndim; ++d) n *= s.global_shape[d];
  return n;
}

// Token ids arrive in backend memory; checking them on the host costs one small copy and turns
// an out-of-range id into an error instead of an out-of-bounds read in the embedding kernel.
// Returns how many entries are >= 0 (the valid targets). `allow_negative`: targets may be < 0.
inline int64_t check_token_ids(const BackendOps& backend, const int32_t* ids, int64_t count, int32_t vocab_size,
                               bool allow_negative, const char* what) {
  std::vector<int32_t> host(static_cast<size_t>(count));
  backend.copy_bytes(host.data(), ids, host.size() * sizeof(int32_t), KEEL_COPY_DEVICE_TO_HOST);
  int64_t valid = 0;
  for (int64_t i = 0; i < count; ++i) {
    int32_t id = host[static_cast<size_t>(i)];
    if (id >= vocab_size || (id < 0 && !allow_negative))
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                                      std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(id) +
                                          " is outside [" + (allow_negative ? "-inf" : "0") + ", " +
                                          std::to_string(vocab_size) + ") (vocab_size)");
    valid += id >= 0;
  }
  return valid;
}

}  // namespace keel_support
