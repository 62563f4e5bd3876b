// The gpt plugin's C face: keel_plugin_entry and the keel_model_api table. Each slot turns the
// C arguments into a GptModel call under keel_support::guard, so no exception crosses the ABI.
#include <keel/model.h>
#include <keel/plugin.h>
#include <keel_support/plugin_entry.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "gpt_model.hpp"  // defines: GptModel, parse_gpt_config

namespace {

constexpr const char* kSource = "model gpt";

keel_gpt::GptModel* as_model(void* model) { return static_cast<keel_gpt::GptModel*>(model); }

// Models are created with a host; calls on a model report through that host.
keel_status require_model(void* model) {
  return model ? KEEL_OK : KEEL_ERR_INVALID_ARGUMENT;  // no host to set a message through
}

keel_status gpt_validate_config(const keel_host* host, const char* config_json, const char* json_path) {
  return keel_support::guard(host, kSource, [&] { keel_gpt::parse_gpt_config(config_json, json_path); });
}

keel_status gpt_create(const keel_host* host, const keel_model_create_args* args, void** out_model) {
  return keel_support::guard(host, kSource, [&] {
    // A core before 0.7 passes the struct up to sequence_parallel: the model then runs whole (pp 1).
    const size_t before_pipelines = offsetof(keel_model_create_args, pp_rank);
    if (!args || args->struct_size < before_pipelines || !out_model)
      throw keel_support::StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: args (with struct_size set) and "
                                                                 "out_model are required");
    *out_model = new keel_gpt::GptModel(host, *args);
  });
}

void gpt_destroy(void* model) {
  if (!model) return;
  const keel_host* host = as_model(model)->host();
  keel_support::guard(host, kSource, [&] { delete as_model(model); });
}

keel_status gpt_describe(void* model, keel_model_info* out_info) {
  if (keel_status s = require_model(model)) return s;
  return keel_support::guard(as_model(model)->host(), kSource, [&] {
    as_model(model)->describe(out_info);
  });
}

keel_status gpt_flops_per_token(void* model, int32_t seq_len, double* out_flops) {
  if (keel_status s = require_model(model)) return s;
  return keel_support::guard(as_model(model)->host(), kSource, [&] {
    if (!out_flops) throw keel_support::StatusError(KEEL_ERR_INVALID_ARGUMENT, "flops_per_token: out_flops is NULL");
    *out_flops = as_model(model)->flops_per_token(seq_len);
  });
}

keel_status gpt_forward(void* model, keel_forward_args* args) {
  if (keel_status s = require_model(model)) return s;
  return keel_support::guard(as_model(model)->host(), kSource, [&] {
    if (!args) throw keel_support::StatusError(KEEL_ERR_INVALID_ARGUMENT, "forward: args is NULL");
    as_model(model)->forward(args);
  });
}

keel_status gpt_backward(void* model, const keel_backward_args* args) {
  if (keel_status s = require_model(model)) return s;
  return keel_support::guard(as_model(model)->host(), kSource, [&] {
    if (!args) throw keel_support::StatusError(KEEL_ERR_INVALID_ARGUMENT, "backward: args is NULL");
    as_model(model)->backward(*args);
  });
}

keel_status gpt_external_name(void* model, const char* format, size_t index, keel_external_tensor* out) {
  if (keel_status s = require_model(model)) return s;
  return keel_support::guard(as_model(model)->host(), kSource, [&] {
    if (!format || !out || out->struct_size < offsetof(keel_external_tensor, name) + sizeof(out->name))
      throw keel_support::StatusError(KEEL_ERR_INVALID_ARGUMENT, "external_name: format and out (with struct_size "
                                                                 "set) are required");
    keel_external_tensor t = as_model(model)->external().tensor(format, index);
    // Only the fields that fit in the caller's struct: an older caller's is shorter.
    const size_t filled = std::min(out->struct_size, sizeof t);
    t.struct_size = filled;  // the bytes written, as every sized output reports
    std::memcpy(out, &t, filled);
  });
}

keel_status gpt_external_config(void* model, const char* format, const char** out_json) {
  if (keel_status s = require_model(model)) return s;
  return keel_support::guard(as_model(model)->host(), kSource, [&] {
    if (!format || !out_json)
      throw keel_support::StatusError(KEEL_ERR_INVALID_ARGUMENT, "external_config: format and out_json are required");
    *out_json = as_model(model)->external().config_json(format);
  });
}

keel_status gpt_stage_io_numel(void* model, int32_t batch, int32_t seq_len, int64_t* out_numel) {
  if (keel_status s = require_model(model)) return s;
  return keel_support::guard(as_model(model)->host(), kSource, [&] {
    if (!out_numel || batch < 1 || seq_len < 1)
      throw keel_support::StatusError(KEEL_ERR_INVALID_ARGUMENT, "stage_io_numel: need batch >= 1, seq_len >= 1 and "
                                                                 "out_numel, found batch " + std::to_string(batch) +
                                                                 ", seq_len " + std::to_string(seq_len));
    *out_numel = as_model(model)->stage_io_numel(batch, seq_len);
  });
}

keel_status gpt_splits_backward(void* model, int32_t* out_splits) {
  if (keel_status s = require_model(model)) return s;
  return keel_support::guard(as_model(model)->host(), kSource, [&] {
    if (!out_splits) throw keel_support::StatusError(KEEL_ERR_INVALID_ARGUMENT, "splits_backward: out_splits is NULL");
    *out_splits = as_model(model)->splits_backward() ? 1 : 0;
  });
}

const keel_model_api kGptApi = {
    sizeof(keel_model_api), gpt_validate_config, gpt_create,         gpt_destroy,         gpt_describe,
    gpt_flops_per_token,    gpt_forward,         gpt_backward,       gpt_external_name,   gpt_external_config,
    gpt_stage_io_numel,     gpt_splits_backward,
};

const keel_plugin_info kPlugins[] = {keel_support::plugin_info(
    KEEL_KIND_MODEL, "gpt", "0.1.0", &kGptApi, "GPT-2 (llm.c's layout): tied embeddings, pre-norm blocks, GELU MLP")};

const keel_plugin_list kPluginList = keel_support::plugin_list(kPlugins);

}  // namespace

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &kPluginList; }
