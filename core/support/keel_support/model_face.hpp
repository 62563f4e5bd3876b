// A model plugin's C face: the keel_model_api table whose every slot turns the C arguments into
// a call on a C++ model object under guard, so no exception crosses the ABI. The gpt and llama
// plugins use it; installed for third-party models. Model provides:
//   static constexpr const char* kSource;  // "model gpt": who speaks in the host's log and errors
//   static void validate_config(const char* config_json, const char* json_path);  // throws
//   Model(const keel_host*, const keel_model_create_args&);
//   host(), describe(keel_model_info*), flops_per_token(int32_t), forward(keel_forward_args*),
//   backward(const keel_backward_args&), external() (an ExternalNames-like object with
//   tensor(format, index) and config_json(format)), stage_io_numel(B, T), splits_backward(),
//   static std::string complete_config(format, external_json, config_json, json_path)  // throws
#pragma once

#include <keel/model.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <type_traits>

#include "keel_support/abi_guard.hpp"
#include "keel_support/external_config.hpp"

namespace keel_support {

template <class Model>
struct ModelFace {
  static Model* as_model(void* model) { return static_cast<Model*>(model); }

  // Models are created with a host; calls on a model report through that host.
  static keel_status require_model(void* model) {
    return model ? KEEL_OK : KEEL_ERR_INVALID_ARGUMENT;  // no host to set a message through
  }

  static keel_status validate_config(const keel_host* host, const char* config_json, const char* json_path) {
    return guard(host, Model::kSource, [&] { Model::validate_config(config_json, json_path); });
  }

  static keel_status create(const keel_host* host, const keel_model_create_args* args, void** out_model) {
    return guard(host, Model::kSource, [&] {
      // A core before 0.7 passes the struct up to sequence_parallel: the model then runs whole (pp 1).
      const size_t before_pipelines = offsetof(keel_model_create_args, pp_rank);
      if (!args || args->struct_size < before_pipelines || !out_model)
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: args (with struct_size set) and out_model are required");
      *out_model = new Model(host, *args);
    });
  }

  static void destroy(void* model) {
    if (!model) return;
    const keel_host* host = as_model(model)->host();
    guard(host, Model::kSource, [&] { delete as_model(model); });
  }

  static keel_status describe(void* model, keel_model_info* out_info) {
    if (keel_status s = require_model(model)) return s;
    return guard(as_model(model)->host(), Model::kSource, [&] { as_model(model)->describe(out_info); });
  }

  static keel_status flops_per_token(void* model, int32_t seq_len, double* out_flops) {
    if (keel_status s = require_model(model)) return s;
    return guard(as_model(model)->host(), Model::kSource, [&] {
      if (!out_flops) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "flops_per_token: out_flops is NULL");
      *out_flops = as_model(model)->flops_per_token(seq_len);
    });
  }

  static keel_status forward(void* model, keel_forward_args* args) {
    if (keel_status s = require_model(model)) return s;
    return guard(as_model(model)->host(), Model::kSource, [&] {
      if (!args) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "forward: args is NULL");
      as_model(model)->forward(args);
    });
  }

  static keel_status backward(void* model, const keel_backward_args* args) {
    if (keel_status s = require_model(model)) return s;
    return guard(as_model(model)->host(), Model::kSource, [&] {
      if (!args) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "backward: args is NULL");
      as_model(model)->backward(*args);
    });
  }

  static keel_status external_name(void* model, const char* format, size_t index, keel_external_tensor* out) {
    if (keel_status s = require_model(model)) return s;
    return guard(as_model(model)->host(), Model::kSource, [&] {
      if (!format || !out || out->struct_size < offsetof(keel_external_tensor, name) + sizeof(out->name))
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                          "external_name: format and out (with struct_size set) are required");
      keel_external_tensor t = as_model(model)->external().tensor(format, index);
      // Only the fields that fit in the caller's struct: an older caller's is shorter.
      const size_t filled = std::min(out->struct_size, sizeof t);
      t.struct_size = filled;  // the bytes written, as every sized output reports
      std::memcpy(out, &t, filled);
    });
  }

  static keel_status external_config(void* model, const char* format, const char** out_json) {
    if (keel_status s = require_model(model)) return s;
    return guard(as_model(model)->host(), Model::kSource, [&] {
      if (!format || !out_json)
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "external_config: format and out_json are required");
      *out_json = as_model(model)->external().config_json(format);
    });
  }

  static keel_status stage_io_numel(void* model, int32_t batch, int32_t seq_len, int64_t* out_numel) {
    if (keel_status s = require_model(model)) return s;
    return guard(as_model(model)->host(), Model::kSource, [&] {
      if (!out_numel || batch < 1 || seq_len < 1)
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "stage_io_numel: need batch >= 1, seq_len >= 1 and out_numel, "
                                                     "found batch " + std::to_string(batch) + ", seq_len " +
                                                     std::to_string(seq_len));
      *out_numel = as_model(model)->stage_io_numel(batch, seq_len);
    });
  }

  static keel_status splits_backward(void* model, int32_t* out_splits) {
    if (keel_status s = require_model(model)) return s;
    return guard(as_model(model)->host(), Model::kSource, [&] {
      if (!out_splits) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "splits_backward: out_splits is NULL");
      *out_splits = as_model(model)->splits_backward() ? 1 : 0;
    });
  }

  static keel_status complete_config(const keel_host* host, const char* format, const char* external_json,
                                     const char* config_json, const char* json_path, char* out, size_t capacity,
                                     size_t* out_length) {
    return guard(host, Model::kSource, [&] {
      if (!format || !external_json)
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "complete_config: format and external_json are required");
      write_text_out(Model::complete_config(format, external_json, config_json, json_path), out, capacity, out_length);
    });
  }

  // Generation with a key/value cache (0.18), for a Model with decode_reset(batch, capacity) and
  // decode(access, tokens, batch, count) returning the logits; NULL slots otherwise.
  template <class M, class = void>
  struct Decodes : std::false_type {};
  template <class M>
  struct Decodes<M, std::void_t<decltype(&M::decode_reset), decltype(&M::decode)>> : std::true_type {};
  static keel_status decode_reset(void* model, int32_t batch, int32_t capacity) {
    if (keel_status s = require_model(model)) return s;
    return guard(as_model(model)->host(), Model::kSource, [&] {
      if (batch < 1 || capacity < 1)
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "decode_reset: need batch >= 1 and capacity >= 1, found " +
                                                         std::to_string(batch) + " and " + std::to_string(capacity));
      if constexpr (Decodes<Model>::value) as_model(model)->decode_reset(batch, capacity);
    });
  }
  static keel_status decode(void* model, const keel_param_access* access, const int32_t* tokens, int32_t batch,
                            int32_t count, const float** out_logits) {
    if (keel_status s = require_model(model)) return s;
    return guard(as_model(model)->host(), Model::kSource, [&] {
      if (!access || !tokens || !out_logits || batch < 1 || count < 1)
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "decode: access, tokens and out_logits are required, with "
                                                     "batch >= 1 and count >= 1");
      if constexpr (Decodes<Model>::value) *out_logits = as_model(model)->decode(access, tokens, batch, count);
    });
  }
  static constexpr auto kDecodeReset = Decodes<Model>::value ? &decode_reset : nullptr;
  static constexpr auto kDecode = Decodes<Model>::value ? &decode : nullptr;

  static constexpr keel_model_api kApi = {
      sizeof(keel_model_api), validate_config, create,   destroy,       describe,        flops_per_token,
      forward,                backward,        external_name, external_config, stage_io_numel, splits_backward,
      complete_config,        kDecodeReset,    kDecode,
  };
};

}  // namespace keel_support
