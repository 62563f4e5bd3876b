// The model table of a plugin, written once: every slot of keel_model_api turns the C arguments
// into a call on a C++ model object under guard, so no exception crosses the ABI. The gpt, llama and
// mlp plugins use it; installed for third-party models. Model provides:
//   static constexpr const char* kSource;  // "model <plugin name>" ("model gpt"): who speaks in
//                                          // the host's log and errors, and whom refusals name
//   static void validate_config(const char* config_json, const char* json_path);  // throws
//   Model(const keel_host*, const keel_model_create_args&);
//   host(), describe(keel_model_info*), flops_per_token(int32_t), forward(keel_forward_args*),
//   backward(const keel_backward_args&)
// and, each only if it supports what the member is for (found by detection; a model without one
// gets its slot answered with KEEL_ERR_UNIMPLEMENTED and a reason naming the model):
//   external()          an ExternalNames-like object with tensor(format, index) and
//                       config_json(format): Hugging Face import and export
//   stage_io_numel(B, T)  pipeline stages; without it create refuses parallel.pp > 1
//   splits_backward()   zero-bubble schedules; without it the answer is 0 (does not split)
//   static std::string complete_config(format, external_json, config_json, json_path)  // throws:
//                       dimensions read from a Hugging Face config.json
//   decode_reset(batch, capacity), decode(access, tokens, batch, count): a key/value cache for
//                       generation; without them the slots are NULL (the core runs whole windows)
//   step_metrics()      the step's named scalars (keel_model_api.step_metrics, 0.19): returns a
//                       const std::vector<StepMetric>& the model owns until its next call, and starts
//                       afresh; without it the slot is NULL (the model reports no metrics)
//   rule_state()        a RuleState* (rule_state.hpp) or nullptr: state moved once per step by a
//                       rule, with its tallies and checkpoint arrays (model.h 0.19 step_tallies,
//                       end_step, own_state_*); without it the slots are NULL
#pragma once

#include <keel/model.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/model/external_config.hpp"
#include "keel_support/model/rule_state.hpp"

namespace keel_support {

// One of a model's per-step metrics (keel_model_metric), named by a string the model keeps.
struct StepMetric {
  std::string name;
  double value = 0;
  int32_t combine = KEEL_METRIC_MEAN;  // over the data-parallel group: KEEL_METRIC_MEAN or KEEL_METRIC_MAX
};

// What a model class defines beyond the required members (C++17 detection: a member that is
// absent makes the specialisation drop out, so the primary template's false is chosen).
namespace model_slots_detail {
template <class M, class = void>
struct HasExternal : std::false_type {};
template <class M>
struct HasExternal<M, std::void_t<decltype(std::declval<M&>().external())>> : std::true_type {};

template <class M, class = void>
struct HasStageIo : std::false_type {};
template <class M>
struct HasStageIo<M, std::void_t<decltype(std::declval<M&>().stage_io_numel(int32_t{}, int32_t{}))>>
    : std::true_type {};

template <class M, class = void>
struct HasSplitsBackward : std::false_type {};
template <class M>
struct HasSplitsBackward<M, std::void_t<decltype(std::declval<M&>().splits_backward())>> : std::true_type {};

template <class M, class = void>
struct HasCompleteConfig : std::false_type {};
template <class M>
struct HasCompleteConfig<M, std::void_t<decltype(M::complete_config(std::declval<const char*>(), std::declval<const char*>(),
                                                                    std::declval<const char*>(), std::declval<const char*>()))>>
    : std::true_type {};
}  // namespace model_slots_detail

template <class Model>
struct ModelSlots {
  static Model* as_model(void* model) { return static_cast<Model*>(model); }

  // The plugin's name for refusals: kSource without its "model " prefix, quoted ("model 'mlp'").
  static std::string named_model() {
    std::string name = Model::kSource;
    const std::string prefix = "model ";
    if (name.compare(0, prefix.size(), prefix) == 0) name.erase(0, prefix.size());
    return "model '" + name + "'";
  }

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
      if constexpr (!model_slots_detail::HasStageIo<Model>::value) {
        // The core trusts a filled stage_io_numel slot; a model without stages must refuse here.
        const bool has_pp = args->struct_size >= offsetof(keel_model_create_args, pp_size) + sizeof(args->pp_size);
        if (has_pp && args->pp_size > 1)  // 0: a zero-filled struct, pp 1
          throw StatusError(KEEL_ERR_UNIMPLEMENTED, "parallel.pp: " + named_model() + " does not split into pipeline "
                                                    "stages (it defines no stage_io_numel); set parallel.pp to 1 "
                                                    "(found pp_size " + std::to_string(args->pp_size) + ")");
      }
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
      if constexpr (model_slots_detail::HasExternal<Model>::value) {
        keel_external_tensor t = as_model(model)->external().tensor(format, index);
        // Only the fields that fit in the caller's struct: an older caller's is shorter. A layout
        // it cannot read (its leading dimensions merged, 0.19) is refused, not silently dropped.
        const size_t filled = std::min(out->struct_size, sizeof t);
        if (t.merge_leading && filled < offsetof(keel_external_tensor, merge_leading) + sizeof t.merge_leading)
          throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string("external_name: ") + t.name + " in the " + format +
                                                       " format merges its leading dimensions (model.h 0.19), "
                                                       "which this caller, built before 0.19, cannot lay out");
        t.struct_size = filled;  // the bytes written, as every sized output reports
        std::memcpy(out, &t, filled);
      } else {
        throw StatusError(KEEL_ERR_UNIMPLEMENTED, no_external_names(format));
      }
    });
  }

  static keel_status external_config(void* model, const char* format, const char** out_json) {
    if (keel_status s = require_model(model)) return s;
    return guard(as_model(model)->host(), Model::kSource, [&] {
      if (!format || !out_json)
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "external_config: format and out_json are required");
      if constexpr (model_slots_detail::HasExternal<Model>::value)
        *out_json = as_model(model)->external().config_json(format);
      else
        throw StatusError(KEEL_ERR_UNIMPLEMENTED, no_external_names(format));
    });
  }

  static std::string no_external_names(const char* format) {
    const std::string asked = std::string(format) == "huggingface" ? "" : " (asked for \"" + std::string(format) + "\")";
    return named_model() + " has no Hugging Face names, nor any other external format's" + asked +
           " (it defines no external())";
  }

  static keel_status stage_io_numel(void* model, int32_t batch, int32_t seq_len, int64_t* out_numel) {
    if (keel_status s = require_model(model)) return s;
    return guard(as_model(model)->host(), Model::kSource, [&] {
      if (!out_numel || batch < 1 || seq_len < 1)
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "stage_io_numel: need batch >= 1, seq_len >= 1 and out_numel, "
                                                     "found batch " + std::to_string(batch) + ", seq_len " +
                                                     std::to_string(seq_len));
      if constexpr (model_slots_detail::HasStageIo<Model>::value)
        *out_numel = as_model(model)->stage_io_numel(batch, seq_len);
      else
        throw StatusError(KEEL_ERR_UNIMPLEMENTED, named_model() + " does not split into pipeline stages (it defines "
                                                  "no stage_io_numel); run it at parallel.pp 1");
    });
  }

  static keel_status splits_backward(void* model, int32_t* out_splits) {
    if (keel_status s = require_model(model)) return s;
    return guard(as_model(model)->host(), Model::kSource, [&] {
      if (!out_splits) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "splits_backward: out_splits is NULL");
      // A model that defines no splits_backward does not split its backward: the core then refuses a
      // zero-bubble schedule naming the schedules that work, which an error here would hide.
      if constexpr (model_slots_detail::HasSplitsBackward<Model>::value)
        *out_splits = as_model(model)->splits_backward() ? 1 : 0;
      else
        *out_splits = 0;
    });
  }

  static keel_status complete_config(const keel_host* host, const char* format, const char* external_json,
                                     const char* config_json, const char* json_path, char* out, size_t capacity,
                                     size_t* out_length) {
    return guard(host, Model::kSource, [&] {
      if (!format || !external_json)
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "complete_config: format and external_json are required");
      if constexpr (model_slots_detail::HasCompleteConfig<Model>::value)
        write_text_out(Model::complete_config(format, external_json, config_json, json_path), out, capacity, out_length);
      else
        throw StatusError(KEEL_ERR_UNIMPLEMENTED,
                          named_model() + " cannot take its dimensions from a Hugging Face config.json (it defines no "
                          "complete_config); name the safetensors file and give every dimension in the model section");
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

  // The step's metrics (0.19), for a Model with step_metrics(); a NULL slot otherwise. The names
  // are checked here, so a model's bad name is refused naming it before the core sees it.
  template <class M, class = void>
  struct ReportsMetrics : std::false_type {};
  template <class M>
  struct ReportsMetrics<M, std::void_t<decltype(std::declval<M&>().step_metrics())>> : std::true_type {};
  static keel_status step_metrics(void* model, keel_model_metric* out, int32_t capacity, int32_t* out_count) {
    if (keel_status s = require_model(model)) return s;
    return guard(as_model(model)->host(), Model::kSource, [&] {
      if (!out || !out_count || capacity < 0)
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step_metrics: out and out_count are required, capacity >= 0");
      if constexpr (ReportsMetrics<Model>::value) {
        const auto& metrics = as_model(model)->step_metrics();
        if (metrics.size() > size_t(capacity))
          throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step_metrics: " + named_model() + " reports " +
                                                           std::to_string(metrics.size()) + " metrics, more than the " +
                                                           std::to_string(capacity) + " the caller has room for");
        for (size_t i = 0; i < metrics.size(); ++i) {
          const StepMetric& m = metrics[i];
          const bool named = !m.name.empty() && m.name.size() < KEEL_MODEL_METRIC_NAME_MAX &&
                             std::all_of(m.name.begin(), m.name.end(), [](char c) {
                               return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                                      c == '_' || c == '.';
                             });
          if (!named || (m.combine != KEEL_METRIC_MEAN && m.combine != KEEL_METRIC_MAX))
            throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                              "step_metrics: " + named_model() + "'s metric " + std::to_string(i) + " (\"" + m.name +
                                  "\", combine " + std::to_string(m.combine) + ") needs a name of 1 to " +
                                  std::to_string(KEEL_MODEL_METRIC_NAME_MAX - 1) +
                                  " letters, digits, '_' or '.' and combine KEEL_METRIC_MEAN or KEEL_METRIC_MAX");
          out[i] = keel_model_metric{m.name.c_str(), m.value, m.combine, 0};
        }
        *out_count = int32_t(metrics.size());
      }
    });
  }
  static constexpr auto kStepMetrics = ReportsMetrics<Model>::value ? &step_metrics : nullptr;

  // Rule-moved state (0.19), for a Model with rule_state(); NULL slots otherwise. A null
  // RuleState (the model keeps none in this configuration) tallies nothing and holds no array.
  template <class M, class = void>
  struct KeepsRuleState : std::false_type {};
  template <class M>
  struct KeepsRuleState<M, std::void_t<decltype(std::declval<M&>().rule_state())>> : std::true_type {};
  static RuleState* rule_state_of(void* model) {
    if constexpr (KeepsRuleState<Model>::value) return as_model(model)->rule_state();
    return nullptr;
  }
  static void require_array(const RuleState* state, int32_t index) {
    if (!state || index < 0 || size_t(index) >= state->array_count())
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "own state array " + std::to_string(index) + " of " + named_model() +
                                                       ", which keeps " +
                                                       std::to_string(state ? state->array_count() : 0));
  }
  static keel_status step_tallies(void* model, double* out, int64_t capacity, int64_t* out_count) {
    if (keel_status s = require_model(model)) return s;
    return guard(as_model(model)->host(), Model::kSource, [&] {
      if (!out_count || capacity < 0 || (capacity > 0 && !out))
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "step_tallies: out_count is required, and out when capacity > 0");
      const RuleState* state = rule_state_of(model);
      const std::vector<double> none;
      const std::vector<double>& tallies = state ? state->step_tallies() : none;
      std::copy_n(tallies.begin(), std::min<size_t>(tallies.size(), size_t(capacity)), out);
      *out_count = int64_t(tallies.size());
    });
  }
  static keel_status end_step(void* model, const double* summed, int64_t count, int32_t applied) {
    if (keel_status s = require_model(model)) return s;
    return guard(as_model(model)->host(), Model::kSource, [&] {
      RuleState* state = rule_state_of(model);
      const int64_t expected = state ? int64_t(state->step_tallies().size()) : 0;
      if (count != expected || (count > 0 && !summed))
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "end_step: " + std::to_string(count) + " summed tallies for " +
                                                         named_model() + ", which tallied " + std::to_string(expected));
      if (state) state->end_step(summed, count, applied != 0);
    });
  }
  static keel_status own_state_count(void* model, int32_t* out) {
    if (keel_status s = require_model(model)) return s;
    return guard(as_model(model)->host(), Model::kSource, [&] {
      const RuleState* state = rule_state_of(model);
      *out = state ? int32_t(state->array_count()) : 0;
    });
  }
  static keel_status own_state_info(void* model, int32_t index, const char** name, int64_t* count) {
    if (keel_status s = require_model(model)) return s;
    return guard(as_model(model)->host(), Model::kSource, [&] {
      const RuleState* state = rule_state_of(model);
      require_array(state, index);
      *name = state->array_name(size_t(index)).c_str();
      *count = state->array_size(size_t(index));
    });
  }
  static keel_status read_own_state(void* model, int32_t index, float* dst) {
    if (keel_status s = require_model(model)) return s;
    return guard(as_model(model)->host(), Model::kSource, [&] {
      const RuleState* state = rule_state_of(model);
      require_array(state, index);
      state->read_array(size_t(index), dst);
    });
  }
  static keel_status write_own_state(void* model, int32_t index, const float* src) {
    if (keel_status s = require_model(model)) return s;
    return guard(as_model(model)->host(), Model::kSource, [&] {
      RuleState* state = rule_state_of(model);
      require_array(state, index);
      state->write_array(size_t(index), src);
    });
  }
  static constexpr bool kRules = KeepsRuleState<Model>::value;

  static constexpr keel_model_api kApi = {
      sizeof(keel_model_api), validate_config, create,   destroy,       describe,        flops_per_token,
      forward,                backward,        external_name, external_config, stage_io_numel, splits_backward,
      complete_config,        kDecodeReset,    kDecode,       kStepMetrics,
      kRules ? &step_tallies : nullptr, kRules ? &end_step : nullptr, kRules ? &own_state_count : nullptr,
      kRules ? &own_state_info : nullptr, kRules ? &read_own_state : nullptr, kRules ? &write_own_state : nullptr,
  };
};

}  // namespace keel_support
