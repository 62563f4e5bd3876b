// The probe of model_probe.h, through the same plugin tables and create arguments a run uses
// (plugin_instances.cpp), less the communicators.
#include "train/model_probe.h"

#include <keel/keel.h>

#include <exception>
#include <string>

#include "host/errors.h"
#include "host/host_table.h"
#include "loader/plugin_registry.h"
#include "mesh/mesh_layout.h"
#include "train/expert_split_strategy.h"
#include "train/shape_only_comm.h"

namespace keel {

int32_t probe_model_layout(const RunConfig& config) {
  auto& registry = PluginRegistry::instance();
  const auto* backend = static_cast<const keel_backend_api*>(registry.find(KEEL_KIND_BACKEND, config.backend.plugin).info.api);
  const auto* model = static_cast<const keel_model_api*>(registry.find(KEEL_KIND_MODEL, config.model.plugin).info.api);
  const std::string backend_json = config.backend.json.dump(), model_json = config.model.json.dump();
  keel_backend_create_args backend_args{sizeof(backend_args), backend_json.c_str(), config.backend.json_path.c_str()};
  void* backend_obj = nullptr;
  check_plugin(backend->create(host_table(), &backend_args, &backend_obj), "creating backend '" + config.backend.plugin + "'");

  ShapeOnlyComm tp_group{0, config.tp}, ep_group{0, config.ep}, cp_group{0, config.cp};
  const bool split = config.tp > 1;  // model.h: no tp group at tp 1
  const bool experts_split = config.ep > 1;  // nor an ep group at ep 1
  const bool sequences_split = config.cp > 1;  // nor a cp group at cp 1
  const int32_t* blocks = config.layers_per_stage.empty() ? nullptr : config.layers_per_stage.data();
  keel_model_create_args args{sizeof(args), model_json.c_str(), config.model.json_path.c_str(), backend, backend_obj,
                              0, config.tp, split ? shape_only_comm_api() : nullptr, split ? &tp_group : nullptr,
                              config.sequence_parallel ? 1 : 0, 0, config.pp, config.virtual_stages, blocks,
                              int32_t(config.layers_per_stage.size()), 0, config.ep,
                              experts_split ? shape_only_comm_api() : nullptr, experts_split ? &ep_group : nullptr,
                              0, config.cp, sequences_split ? shape_only_comm_api() : nullptr,
                              sequences_split ? &cp_group : nullptr, config.cp_all_gather ? 1 : 0};
  void* model_obj = nullptr;
  keel_status status = model->create(host_table(), &args, &model_obj);
  // Worded as a run words it (plugin_instances.cpp), so validate and run refuse alike.
  std::string problem = status == KEEL_OK ? "" : "creating model '" + config.model.plugin + "': " + last_error();
  keel_model_info info{};
  info.struct_size = sizeof(info);
  if (status == KEEL_OK) {
    status = model->describe(model_obj, &info);
    if (status != KEEL_OK) problem = "model '" + config.model.plugin + "' describe: " + last_error();
  }
  std::exception_ptr no_experts;
  if (status == KEEL_OK) {
    try {
      require_expert_tensors(config.file, config.ep, config.pp, info.params, info.n_params);
      require_sequence_split(config, info);
    } catch (const KeelError&) {
      no_experts = std::current_exception();
    }
  }
  if (model_obj) model->destroy(model_obj);
  backend->destroy(backend_obj);
  if (status != KEEL_OK) throw KeelError(status, config.file + ": " + problem);
  if (no_experts) std::rethrow_exception(no_experts);
  return info.max_seq_len;
}

}  // namespace keel
