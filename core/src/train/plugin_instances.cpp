// Resolving config sections to plugins and creating their objects.
#include "train/plugin_instances.h"

#include "host/errors.h"
#include "host/host_table.h"
#include "host/log.h"
#include "loader/plugin_registry.h"
#include "train/model_specs.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>
#include <cstddef>
#include <cstring>

namespace keel {
namespace {

template <typename Table>
const Table* table_for(int32_t kind, const PluginSection& section, const RunConfig& config) {
  try {
    return static_cast<const Table*>(PluginRegistry::instance().find(kind, section.plugin).info.api);
  } catch (const KeelError& e) {
    throw KeelError(e.code, config.file + ": " + section.json_path + ".plugin: " + e.what());
  }
}

// Runs a plugin's validate_config and prefixes its message with the file.
template <typename Table>
void validate_section(const Table* table, const PluginSection& section, const RunConfig& config) {
  const std::string text = section.json.dump();
  keel_status status = table->validate_config(host_table(), text.c_str(), section.json_path.c_str());
  if (status != KEEL_OK) throw KeelError(status, config.file + ": " + last_error());
}

}  // namespace

void validate_plugin_sections(const RunConfig& config) {
  PluginRegistry::instance().add_search_folders(config.plugin_path);
  validate_section(table_for<keel_backend_api>(KEEL_KIND_BACKEND, config.backend, config), config.backend, config);
  validate_section(table_for<keel_model_api>(KEEL_KIND_MODEL, config.model, config), config.model, config);
  validate_section(table_for<keel_optimizer_api>(KEEL_KIND_OPTIMIZER, config.optimizer, config), config.optimizer, config);
  validate_section(table_for<keel_strategy_api>(KEEL_KIND_STRATEGY, config.strategy, config), config.strategy, config);
  if (!config.data_plugin.plugin.empty())
    validate_section(table_for<keel_data_api>(KEEL_KIND_DATA, config.data_plugin, config), config.data_plugin, config);
  validate_section(table_for<keel_schedule_api>(KEEL_KIND_SCHEDULE, config.schedule, config), config.schedule, config);
  if (config.offload.enabled()) {
    validate_section(table_for<keel_offload_api>(KEEL_KIND_OFFLOAD, config.offload.tier, config), config.offload.tier,
                     config);
    // A strategy built before 0.7 reads a create args struct without the tier and would keep
    // everything resident, silently.
    const keel_plugin_info& strategy_info = PluginRegistry::instance().find(KEEL_KIND_STRATEGY, config.strategy.plugin).info;
    if (strategy_info.abi_minor < 7)
      throw KeelError(KEEL_ERR_UNIMPLEMENTED, config.file + ": offload: the offload tier came in ABI 0.7; " +
                                                  config.strategy.json_path + ".plugin '" + config.strategy.plugin +
                                                  "' was built against 0." + std::to_string(strategy_info.abi_minor) +
                                                  " and cannot keep arrays there. Rebuild it, or remove the \"offload\" "
                                                  "section");
  }
}

// A plugin built before `minor` cannot take part in `what`; say which and how to go on.
void PluginInstances::require_abi(const RunConfig& config, uint32_t minor, const std::string& what) const {
  auto& registry = PluginRegistry::instance();
  for (auto [kind, section] : {std::pair<int32_t, const PluginSection*>{KEEL_KIND_MODEL, &config.model},
                               {KEEL_KIND_STRATEGY, &config.strategy}}) {
    const keel_plugin_info& info = registry.find(kind, section->plugin).info;
    if (info.abi_minor < minor)
      throw KeelError(KEEL_ERR_UNIMPLEMENTED, config.file + ": " + what + ", which came in ABI 0." + std::to_string(minor) +
                                                  "; " + section->json_path + ".plugin '" + section->plugin +
                                                  "' was built against 0." + std::to_string(info.abi_minor) +
                                                  ". Rebuild it, or run without it");
  }
}

void PluginInstances::create(const RunConfig& config) {
  validate_plugin_sections(config);
  backend = table_for<keel_backend_api>(KEEL_KIND_BACKEND, config.backend, config);
  model = table_for<keel_model_api>(KEEL_KIND_MODEL, config.model, config);
  optimizer = table_for<keel_optimizer_api>(KEEL_KIND_OPTIMIZER, config.optimizer, config);
  strategy = table_for<keel_strategy_api>(KEEL_KIND_STRATEGY, config.strategy, config);
  schedule = table_for<keel_schedule_api>(KEEL_KIND_SCHEDULE, config.schedule, config);
  const keel_host* host = host_table();
  create_mesh(config);

  const std::string backend_json = config.backend.json.dump();
  keel_backend_create_args backend_args{sizeof(backend_args), backend_json.c_str(), config.backend.json_path.c_str()};
  check_plugin(backend->create(host, &backend_args, &backend_obj), "creating backend '" + config.backend.plugin + "'");

  const std::string model_json = config.model.json.dump();
  auto& registry = PluginRegistry::instance();
  // A plugin built before 0.6 neither receives a tp group nor knows that pieces are boxes; one
  // built before 0.7 knows nothing of chunks, tied stages or backwards out of forward order.
  if (tp_size > 1) require_abi(config, 6, "parallel.tp: " + std::to_string(tp_size) + " needs tensor-parallel pieces");
  if (pp_size > 1) require_abi(config, 7, "parallel.pp: " + std::to_string(pp_size) + " needs pipeline chunks");
  if (pp_size > 1 && !KEEL_HAS_SLOT(model, stage_io_numel))
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, config.file + ": parallel.pp: model '" + config.model.plugin +
                                                "' cannot be cut into pipeline stages (it has no stage_io_numel); run it at pp 1");
  const int32_t* stage_blocks = config.layers_per_stage.empty() ? nullptr : config.layers_per_stage.data();
  keel_model_create_args model_args{sizeof(model_args), model_json.c_str(), config.model.json_path.c_str(),
                                    backend, backend_obj, tp_rank, tp_size,
                                    tp_size > 1 ? comm : nullptr, tp_size > 1 ? tp_obj : nullptr,
                                    config.sequence_parallel ? 1 : 0,  // model.h: NULL at tp 1
                                    pp_rank, pp_size, virtual_stages, stage_blocks,
                                    int32_t(config.layers_per_stage.size())};
  check_plugin(model->create(host, &model_args, &model_obj), "creating model '" + config.model.plugin + "'");
  model_info.struct_size = sizeof(model_info);
  check_plugin(model->describe(model_obj, &model_info), "model '" + config.model.plugin + "' describe");
  if (schedule->splits_backward) {
    int32_t splits = 0;
    if (KEEL_HAS_SLOT(model, splits_backward)) check_plugin(model->splits_backward(model_obj, &splits), "model splits_backward");
    if (!splits)
      throw KeelError(KEEL_ERR_UNIMPLEMENTED, config.file + ": parallel.schedule.plugin: '" + config.schedule.plugin +
                                                  "' splits each backward into input and weight gradients, which model '" +
                                                  config.model.plugin + "' cannot do; use \"1f1b\" or \"interleaved\"");
  }
  adopt_model_specs(config);

  const std::string optimizer_json = config.optimizer.json.dump();
  check_plugin(optimizer->create(host, optimizer_json.c_str(), config.optimizer.json_path.c_str(), &optimizer_obj),
               "creating optimizer '" + config.optimizer.plugin + "'");
  optimizer_info.struct_size = sizeof(optimizer_info);
  check_plugin(optimizer->describe(optimizer_obj, &optimizer_info), "optimizer '" + config.optimizer.plugin + "' describe");

  create_offload(config);
  const std::string strategy_json = config.strategy.json.dump();
  // A strategy built before 0.6 indexes the specs with its own, shorter struct.
  const keel_param_spec* strategy_params = model_info.params;
  if (registry.find(KEEL_KIND_STRATEGY, config.strategy.plugin).info.abi_minor < 6) {
    strategy_specs = narrow_model_specs(specs, offsetof(keel_param_spec, local_offset));
    strategy_params = reinterpret_cast<const keel_param_spec*>(strategy_specs.data());
  }
  keel_strategy_create_args strategy_args{sizeof(strategy_args), strategy_json.c_str(), config.strategy.json_path.c_str(),
                                          backend, backend_obj, optimizer, optimizer_obj, strategy_params,
                                          model_info.n_params, model_info.n_layers, config.train.seed,
                                          dp_obj ? comm : nullptr, dp_obj, dp_rank, dp_size, tp_rank, tp_size,
                                          pp_rank, pp_size, embedding_obj ? comm : nullptr, embedding_obj,
                                          offload, offload_obj, offload ? config.offload.arrays() : 0u};
  if (dp_size > 1 && !KEEL_HAS_SLOT(strategy, owned_range))
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, config.file + ": parallel.strategy.plugin: strategy '" + config.strategy.plugin +
                                                "' was built for an ABI older than 0.4 and knows nothing of data "
                                                "parallelism; run it on one rank or rebuild it against this Keel");
  check_plugin(strategy->create(host, &strategy_args, &strategy_obj), "creating strategy '" + config.strategy.plugin + "'");
  access.struct_size = sizeof(access);
  check_plugin(strategy->param_access(strategy_obj, &access), "strategy '" + config.strategy.plugin + "' param_access");

  if (!config.data_plugin.plugin.empty()) {
    data = table_for<keel_data_api>(KEEL_KIND_DATA, config.data_plugin, config);
    const std::string data_json = config.data_plugin.json.dump();
    check_plugin(data->create(host, data_json.c_str(), config.data_plugin.json_path.c_str(), &data_obj),
                 "creating data source '" + config.data_plugin.plugin + "'");
  }
}

// The tier of the "offload" section, for the strategy alone (strategy.h offload); the strategy's
// ABI was checked with the sections.
void PluginInstances::create_offload(const RunConfig& config) {
  if (!config.offload.enabled()) return;
  offload = table_for<keel_offload_api>(KEEL_KIND_OFFLOAD, config.offload.tier, config);
  keel_device device{};
  check_plugin(backend->device(backend_obj, &device), "backend '" + config.backend.plugin + "' device");
  const std::string offload_json = config.offload.tier.json.dump();
  keel_offload_create_args offload_args{sizeof(offload_args), offload_json.c_str(), config.offload.tier.json_path.c_str(),
                                        world_rank, device.device_type == KEEL_DEVICE_CPU ? 0 : 1};
  check_plugin(offload->create(host_table(), &offload_args, &offload_obj),
               "creating offload tier '" + config.offload.tier.plugin + "'");
}

std::optional<keel_offload_counters> PluginInstances::offload_counters() const {
  if (!offload_obj) return std::nullopt;
  keel_offload_counters counters{};
  counters.struct_size = sizeof(counters);
  check_plugin(offload->counters(offload_obj, &counters), "offload counters");
  return counters;
}

// The mesh of docs/architecture.md §4 (pp × dp × tp, tp fastest): with tp = pp = 1 every rank is in one
// data-parallel group, split from the world so the shape is already the general one.
void PluginInstances::create_mesh(const RunConfig& config) {
  PluginRegistry& registry = PluginRegistry::instance();
  try {
    comm = static_cast<const keel_comm_api*>(registry.find(KEEL_KIND_COMM, config.comm.plugin).info.api);
  } catch (const KeelError& e) {
    if (config.comm_explicit) throw KeelError(e.code, config.file + ": comm.plugin: " + e.what());
    if (config.tp * config.pp > 1)
      throw KeelError(KEEL_ERR_INVALID_CONFIG, config.file + ": parallel: tp " + std::to_string(config.tp) + " × pp " +
                                                   std::to_string(config.pp) + " needs that many ranks, but no comm "
                                                   "plugin is installed (" + e.what() + ")");
    return;  // no comm plugin installed and none asked for: one process
  }
  const std::string comm_json = config.comm.json.dump();
  check_plugin(comm->create_world(host_table(), comm_json.c_str(), config.comm.json_path.c_str(), &world_obj),
               "comm '" + config.comm.plugin + "' create_world");
  check_plugin(comm->rank(world_obj, &world_rank), "comm rank");
  check_plugin(comm->size(world_obj, &world_size), "comm size");
  set_log_rank(world_rank, world_size);
  const int32_t tp = config.tp, pp = config.pp;
  if (world_size % (tp * pp) != 0)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, config.file + ": parallel: " + std::to_string(world_size) +
                                                 " ranks do not divide into tp " + std::to_string(tp) + " × pp " +
                                                 std::to_string(pp) + " (dp = ranks / (tp · pp) must be a whole "
                                                 "number); launch a multiple of " + std::to_string(tp * pp) + " ranks");
  const int32_t tp_index = world_rank % tp, dp_index = (world_rank / tp) % (world_size / (tp * pp)),
                pp_index = world_rank / (world_size / pp);
  check_plugin(comm->split(world_obj, pp_index * tp + tp_index, dp_index, &dp_obj), "comm split (data-parallel group)");
  // A second communicator over the same ranks for the core: the strategy may be using dp_obj from
  // its own thread (ddp's bucket reduction) while the core gathers the loss.
  check_plugin(comm->split(world_obj, pp_index * tp + tp_index, dp_index, &core_dp_obj),
               "comm split (the core's data-parallel communicator)");
  check_plugin(comm->rank(dp_obj, &dp_rank), "comm rank");
  check_plugin(comm->size(dp_obj, &dp_size), "comm size");
  // The tensor-parallel group: the ranks that share a dp and a pp position, ordered by tp index.
  const int32_t dp = world_size / (tp * pp);
  check_plugin(comm->split(world_obj, pp_index * dp + dp_index, tp_index, &tp_obj), "comm split (tensor-parallel group)");
  check_plugin(comm->split(world_obj, pp_index * dp + dp_index, tp_index, &core_tp_obj),
               "comm split (the core's tensor-parallel communicator)");
  check_plugin(comm->rank(tp_obj, &tp_rank), "comm rank");
  check_plugin(comm->size(tp_obj, &tp_size), "comm size");
  if (tp_size != tp || tp_rank != tp_index)
    throw KeelError(KEEL_ERR_INTERNAL, "comm split gave tp rank " + std::to_string(tp_rank) + " of " +
                                           std::to_string(tp_size) + ", expected " + std::to_string(tp_index) + " of " +
                                           std::to_string(tp));
  pp_rank = pp_index;
  pp_size = pp;
  virtual_stages = config.virtual_stages;
  if (pp == 1) return;
  // The pipeline group: the ranks that share a dp and a tp position, ordered by stage. Split by
  // every rank (split is collective over the world).
  check_plugin(comm->split(world_obj, dp_index * tp + tp_index, pp_index, &pp_obj), "comm split (pipeline group)");
  // The embedding group (Megatron's): the first and the last stage of this pipeline, which both
  // hold the tied word embedding. Every other rank gets a group of its own and drops it.
  const bool holds_embedding = pp_index == 0 || pp_index == pp - 1;
  void* embedding = nullptr;
  check_plugin(comm->split(world_obj, holds_embedding ? dp_index * tp + tp_index : dp * tp + world_rank, pp_index,
                           &embedding),
               "comm split (embedding group)");
  if (holds_embedding) embedding_obj = embedding;
  else comm->destroy(embedding);
}

void PluginInstances::adopt_model_specs(const RunConfig& config) {
  specs = widen_model_specs(model_info.params, model_info.n_params, tp_rank, tp_size,
                            config.file + ": model '" + config.model.plugin + "': parameter ");
  model_info.params = specs.data();
}

void PluginInstances::abort_all_ranks(const std::string& reason) {
  if (!comm || !world_obj || world_size == 1) return;
  std::fprintf(stderr, "keel: rank %d of %d: %s\n", world_rank, world_size, reason.c_str());
  std::fflush(stderr);
  if (offload_obj) {
    // A strategy whose thread waits in a collective on a peer that failed may never finish its
    // destroy: past the grace the world ends anyway, and the next run removes the tier's files.
    std::thread([this] {
      std::this_thread::sleep_for(std::chrono::seconds(kFailureTeardownSeconds));
      comm->abort_world(world_obj, 1, "removing the offload tier after the error above took too long");
    }).detach();
    if (strategy_obj) strategy->destroy(std::exchange(strategy_obj, nullptr));
    offload->destroy(std::exchange(offload_obj, nullptr));
  }
  // The launcher forwards each rank's output on its own schedule and may drop what a rank wrote
  // just before the abort ended the job: give it a moment to pass the line above on.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  comm->abort_world(world_obj, 1, "ending every rank after the error above");
}

PluginInstances::~PluginInstances() {
  if (data_obj) data->destroy(data_obj);
  if (strategy_obj) strategy->destroy(strategy_obj);
  if (offload_obj) offload->destroy(offload_obj);  // after the strategy: it calls the tier until destroyed
  if (optimizer_obj) optimizer->destroy(optimizer_obj);
  if (model_obj) model->destroy(model_obj);
  if (backend_obj) backend->destroy(backend_obj);
  if (embedding_obj) comm->destroy(embedding_obj);
  if (pp_obj) comm->destroy(pp_obj);
  if (core_tp_obj) comm->destroy(core_tp_obj);
  if (tp_obj) comm->destroy(tp_obj);
  if (core_dp_obj) comm->destroy(core_dp_obj);
  if (dp_obj) comm->destroy(dp_obj);
  if (world_obj) comm->destroy(world_obj);
}

}  // namespace keel
