// Resolving config sections to plugins and creating their objects.
#include "train/plugin_instances.h"

#include <keel_support/model/compute_ops.hpp>
#include <keel_support/strategy/packed_state.hpp>

#include "host/errors.h"
#include "host/host_table.h"
#include "host/log.h"
#include "loader/plugin_registry.h"
#include "train/expert_split_strategy.h"
#include "train/frozen_split_strategy.h"
#include "train/model_specs.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>
#include <tuple>
#include <utility>
#include <cstddef>
#include <cstring>

#include <unistd.h>

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

// The comm section, checked as the run will check it: a config that names its comm plugin needs
// it installed; without one named, one process runs alone when none is (mesh.cpp), so there is
// nothing to check then.
void validate_comm_section(const RunConfig& config) {
  const keel_comm_api* comm = nullptr;
  try {
    comm = static_cast<const keel_comm_api*>(PluginRegistry::instance().find(KEEL_KIND_COMM, config.comm.plugin).info.api);
  } catch (const KeelError& e) {
    if (config.comm_explicit) throw KeelError(e.code, config.file + ": comm.plugin: " + e.what());
    return;
  }
  validate_section(comm, config.comm, config);
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
  validate_comm_section(config);
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

// An optimizer with packed state (0.12) needs a strategy that hands it its buffers: one built
// before 0.12 would allocate fp32 state per element and fail at the first step.
void PluginInstances::require_strategy_for_packed_state(const RunConfig& config) const {
  if (!(keel_support::optimizer_flags(optimizer, optimizer_info) & KEEL_OPTIMIZER_PACKED_STATE)) return;
  const keel_plugin_info& strategy_info = PluginRegistry::instance().find(KEEL_KIND_STRATEGY, config.strategy.plugin).info;
  if (strategy_info.abi_minor < 12)
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, config.file + ": " + config.optimizer.json_path + ".plugin '" +
                                                config.optimizer.plugin + "' keeps its state packed (ABI 0.12), and " +
                                                config.strategy.json_path + ".plugin '" + config.strategy.plugin +
                                                "' was built against 0." + std::to_string(strategy_info.abi_minor) +
                                                ", which allocates fp32 state per element. Rebuild the strategy, or "
                                                "choose an optimizer such as adamw");
}

void PluginInstances::create(const RunConfig& config) {
  validate_plugin_sections(config);
  backend = table_for<keel_backend_api>(KEEL_KIND_BACKEND, config.backend, config);
  model = table_for<keel_model_api>(KEEL_KIND_MODEL, config.model, config);
  optimizer = table_for<keel_optimizer_api>(KEEL_KIND_OPTIMIZER, config.optimizer, config);
  strategy = table_for<keel_strategy_api>(KEEL_KIND_STRATEGY, config.strategy, config);
  schedule = table_for<keel_schedule_api>(KEEL_KIND_SCHEDULE, config.schedule, config);
  create_backend(config);
  require_model_for_compute_type(config);
  mesh.create(config, keel_support::BackendOps{backend, backend_obj});
  // A plugin built before 0.6 neither receives a tp group nor knows that pieces are boxes; one
  // built before 0.7 knows nothing of chunks, tied stages or backwards out of forward order.
  require_plugins_for_layout(config, mesh.layout());
  create_model(config);
  const std::string optimizer_json = config.optimizer.json.dump();
  check_plugin(optimizer->create(host_table(), optimizer_json.c_str(), config.optimizer.json_path.c_str(), &optimizer_obj),
               "creating optimizer '" + config.optimizer.plugin + "'");
  optimizer_info.struct_size = sizeof(optimizer_info);
  check_plugin(optimizer->describe(optimizer_obj, &optimizer_info), "optimizer '" + config.optimizer.plugin + "' describe");
  require_strategy_for_packed_state(config);
  create_offload(config);
  create_strategy(config);
  if (!config.data_plugin.plugin.empty()) {
    data = table_for<keel_data_api>(KEEL_KIND_DATA, config.data_plugin, config);
    const std::string data_json = config.data_plugin.json.dump();
    check_plugin(data->create(host_table(), data_json.c_str(), config.data_plugin.json_path.c_str(), &data_obj),
                 "creating data source '" + config.data_plugin.plugin + "'");
  }
}

// The backend first: a device communicator is created on it (comm.h create_world_on). One that
// cannot run here (no GPU) says why before anything is allocated.
void PluginInstances::create_backend(const RunConfig& config) {
  if (KEEL_HAS_SLOT(backend, probe))
    check_plugin(backend->probe(host_table()), config.file + ": " + config.backend.json_path + ".plugin '" +
                                                   config.backend.plugin + "' probe");
  const std::string backend_json = config.backend.json.dump();
  keel_backend_create_args backend_args{sizeof(backend_args), backend_json.c_str(), config.backend.json_path.c_str()};
  check_plugin(backend->create(host_table(), &backend_args, &backend_obj), "creating backend '" + config.backend.plugin + "'");
}

// A model built before 0.8 computes in fp32 whatever the backend says: refused under bf16.
void PluginInstances::require_model_for_compute_type(const RunConfig& config) const {
  if (keel_support::is_fp32(keel_support::compute_dtype_of({backend, backend_obj}))) return;
  const uint32_t minor = PluginRegistry::instance().find(KEEL_KIND_MODEL, config.model.plugin).info.abi_minor;
  if (minor < 8)
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, config.file + ": " + config.backend.json_path + ".precision: model '" +
                                                config.model.plugin + "' was built against ABI 0." + std::to_string(minor) +
                                                " and computes in fp32 only; a bf16 compute type needs a model built "
                                                "against 0.8 or later");
}

// The model's piece of the mesh: its tp group, its pipeline stage and chunks; then its specs,
// and whether it can split a backward when the schedule asks.
void PluginInstances::create_model(const RunConfig& config) {
  const MeshLayout& layout = mesh.layout();
  const MeshPosition& at = mesh.position();
  if (layout.pp > 1 && !KEEL_HAS_SLOT(model, stage_io_numel))
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, config.file + ": parallel.pp: model '" + config.model.plugin +
                                                "' cannot be cut into pipeline stages (it has no stage_io_numel); run it at pp 1");
  const std::string model_json = config.model.json.dump();
  const int32_t* stage_blocks = config.layers_per_stage.empty() ? nullptr : config.layers_per_stage.data();
  keel_model_create_args model_args{sizeof(model_args), model_json.c_str(), config.model.json_path.c_str(),
                                    backend, backend_obj, at.tp, layout.tp,
                                    layout.tp > 1 ? mesh.model_tp.comm : nullptr, layout.tp > 1 ? mesh.model_tp.obj : nullptr,
                                    config.sequence_parallel ? 1 : 0,  // model.h: NULL at tp 1
                                    at.pp, layout.pp, layout.virtual_stages, stage_blocks,
                                    int32_t(config.layers_per_stage.size()), layout.ep_rank(at), layout.ep,
                                    layout.ep > 1 ? mesh.model_ep.comm : nullptr,  // model.h: NULL at ep 1
                                    layout.ep > 1 ? mesh.model_ep.obj : nullptr,
                                    layout.cp_rank(at), layout.cp,
                                    layout.cp > 1 ? mesh.model_cp.comm : nullptr,  // model.h: NULL at cp 1
                                    layout.cp > 1 ? mesh.model_cp.obj : nullptr,
                                    config.cp_all_gather ? 1 : 0};
  check_plugin(model->create(host_table(), &model_args, &model_obj), "creating model '" + config.model.plugin + "'");
  model_info.struct_size = sizeof(model_info);
  check_plugin(model->describe(model_obj, &model_info), "model '" + config.model.plugin + "' describe");
  require_sequence_split(config, model_info);
  if (schedule->splits_backward) {
    int32_t splits = 0;
    if (KEEL_HAS_SLOT(model, splits_backward)) check_plugin(model->splits_backward(model_obj, &splits), "model splits_backward");
    if (!splits)
      throw KeelError(KEEL_ERR_UNIMPLEMENTED, config.file + ": parallel.schedule.plugin: '" + config.schedule.plugin +
                                                  "' splits each backward into input and weight gradients, which model '" +
                                                  config.model.plugin + "' cannot do; use \"1f1b\" or \"interleaved\"");
  }
  adopt_model_specs(config);
}

// The strategy gets the model's specs (narrowed for one built before 0.6), the optimizer, its
// dp group, the embedding group on the first and last stage, and the offload tier.
void PluginInstances::create_strategy(const RunConfig& config) {
  const MeshLayout& layout = mesh.layout();
  const MeshPosition& at = mesh.position();
  const std::string strategy_json = config.strategy.json.dump();
  const keel_param_spec* strategy_params = model_info.params;
  if (PluginRegistry::instance().find(KEEL_KIND_STRATEGY, config.strategy.plugin).info.abi_minor < 6) {
    strategy_specs = narrow_model_specs(specs, offsetof(keel_param_spec, local_offset));
    strategy_params = reinterpret_cast<const keel_param_spec*>(strategy_specs.data());
  }
  keel_strategy_create_args strategy_args{sizeof(strategy_args), strategy_json.c_str(), config.strategy.json_path.c_str(),
                                          backend, backend_obj, optimizer, optimizer_obj, strategy_params,
                                          model_info.n_params, model_info.n_layers, config.train.seed,
                                          mesh.strategy_dp.obj ? mesh.strategy_dp.comm : nullptr, mesh.strategy_dp.obj,
                                          at.dp, layout.dp, at.tp, layout.tp, at.pp, layout.pp,
                                          mesh.embedding.obj ? mesh.embedding.comm : nullptr, mesh.embedding.obj,
                                          offload, offload_obj, offload ? config.offload.arrays() : 0u};
  // The dp group's levels (strategy.h 0.19): NULL at one level.
  const CommGroup& inner = mesh.strategy_dp_inner;
  const CommGroup& outer = mesh.strategy_dp_outer;
  strategy_args.dp_inner_comm = inner.obj ? inner.comm : nullptr;
  strategy_args.dp_inner_comm_obj = inner.obj;
  strategy_args.dp_inner_rank = inner.rank;
  strategy_args.dp_inner_size = inner.size;
  strategy_args.dp_outer_comm = outer.obj ? outer.comm : nullptr;
  strategy_args.dp_outer_comm_obj = outer.obj;
  strategy_args.dp_outer_rank = outer.rank;
  strategy_args.dp_outer_size = outer.size;
  if (mesh.strategy_dp_inner.obj &&
      PluginRegistry::instance().find(KEEL_KIND_STRATEGY, config.strategy.plugin).info.abi_minor < 19)
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, config.file + ": parallel.dp_groups: strategy '" + config.strategy.plugin +
                                                "' was built before ABI 0.19 and knows nothing of the data-parallel "
                                                "group's levels; use dp_groups \"flat\" or rebuild it against this Keel");
  if (layout.dp > 1 && !KEEL_HAS_SLOT(strategy, owned_range))
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, config.file + ": parallel.strategy.plugin: strategy '" + config.strategy.plugin +
                                                "' was built for an ABI older than 0.4 and knows nothing of data "
                                                "parallelism; run it on one rank or rebuild it against this Keel");
  const bool old_specs = PluginRegistry::instance().find(KEEL_KIND_STRATEGY, config.strategy.plugin).info.abi_minor < 6;
  // The configured strategy over `args`: alone, or twice behind one table when experts are split
  // from the dense tensors (the dense half over the dp group, the experts over their
  // expert-data-parallel group: expert_split_strategy.h).
  // The whole model's, before a frozen part is split off: a LoRA run's experts may all be frozen,
  // the expert half of its trainable part then empty.
  if (layout.ep > 1) require_expert_tensors(config.file, layout.ep, layout.pp, model_info.params, model_info.n_params);
  auto create_configured = [&](const keel_strategy_create_args& args) -> std::pair<const keel_strategy_api*, void*> {
    if (layout.ep > 1)
      return {SplitStrategy::table(), static_cast<SplitStrategy*>(new ExpertSplitStrategy(
                                          strategy, args, mesh.strategy_expert_dp, mesh.core_ep, config.file,
                                          config.strategy.plugin))};
    void* obj = nullptr;
    check_plugin(strategy->create(host_table(), &args, &obj), "creating strategy '" + config.strategy.plugin + "'");
    return {strategy, obj};
  };
  if (has_frozen_tensors(model_info.params, model_info.n_params)) {
    // The frozen tensors held by the core, the configured strategy over the rest
    // (frozen_split_strategy.h); specs narrowed for an old strategy after the split.
    keel_strategy_create_args whole = strategy_args;
    whole.params = model_info.params;
    auto create_trainable = [&](const keel_strategy_create_args& args) {
      keel_strategy_create_args part = args;
      if (old_specs) {
        strategy_specs = narrow_model_specs(std::vector<keel_param_spec>(args.params, args.params + args.n_params),
                                            offsetof(keel_param_spec, local_offset));
        part.params = reinterpret_cast<const keel_param_spec*>(strategy_specs.data());
      }
      return create_configured(part);
    };
    strategy_obj = static_cast<SplitStrategy*>(
        new FrozenSplitStrategy(whole, create_trainable, config.strategy.plugin, config.file + ": "));
    strategy = SplitStrategy::table();
  } else {
    std::tie(strategy, strategy_obj) = create_configured(strategy_args);
  }
  if (mesh.strategy_dp_inner.obj) {  // given the levels: it must say it works in them (strategy.h 0.19)
    keel_strategy_info info{};
    info.struct_size = sizeof(info);
    check_plugin(strategy->describe(strategy_obj, &info), "strategy '" + config.strategy.plugin + "' describe");
    if (!info.dp_levels)
      throw KeelError(KEEL_ERR_UNIMPLEMENTED, config.file + ": parallel.dp_groups: strategy '" + config.strategy.plugin +
                                                  "' does not say it works in the data-parallel group's levels "
                                                  "(keel_strategy_info.dp_levels); use dp_groups \"flat\"");
  }
  access.struct_size = sizeof(access);
  check_plugin(strategy->param_access(strategy_obj, &access), "strategy '" + config.strategy.plugin + "' param_access");
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
                                        mesh.world.rank, device.device_type == KEEL_DEVICE_CPU ? 0 : 1};
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

void PluginInstances::adopt_model_specs(const RunConfig& config) {
  specs = widen_model_specs(model_info.params, model_info.n_params, mesh.position().tp, mesh.layout().tp,
                            config.file + ": model '" + config.model.plugin + "': parameter ");
  model_info.params = specs.data();
}

void PluginInstances::abort_all_ranks(const std::exception& failure) {
  if (mesh.world.alone()) return;
  // A failure every rank agreed on is said once, by rank 0; the others keep quiet.
  const auto* alike = dynamic_cast<const FailedOnEveryRank*>(&failure);
  if (!alike) {
    // One write of a whole line: every failing rank says this at once, often with the same reason.
    // Rank 0 draws the progress bar on the terminal the ranks share (a launcher's pseudo-terminal),
    // and another rank cannot tell whether that line is open: its line starts on a fresh one.
    const bool bar_elsewhere = mesh.world.rank != 0 && ::isatty(STDOUT_FILENO) == 1;
    if (bar_elsewhere) set_progress_line_open(true);
    write_stderr_line("keel: rank " + std::to_string(mesh.world.rank) + " of " + std::to_string(mesh.world.size) + ": " +
                      failure.what());
  } else if (alike->says_it()) {
    write_stderr_line("keel: " + alike->line());
  }
  if (offload_obj) {
    // A strategy whose thread waits in a collective on a peer that failed may never finish its
    // destroy: past the grace the world ends anyway, and the next run removes the tier's files.
    std::thread([this] {
      std::this_thread::sleep_for(std::chrono::seconds(kFailureTeardownSeconds));
      mesh.abort_world("removing the offload tier after the error above took too long");
    }).detach();
    if (strategy_obj) strategy->destroy(std::exchange(strategy_obj, nullptr));
    offload->destroy(std::exchange(offload_obj, nullptr));
  }
  // The launcher forwards each rank's output on its own schedule and may drop what a rank wrote
  // just before the abort ended the job: give it a moment to pass the line above on.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  // The comm plugin's line starts on a fresh one below a bar redrawn meanwhile, on any rank's
  // terminal (rank 0's bar may still be redrawing the step before the failure): the bar's text goes
  // out first, then a newline.
  if (::isatty(STDOUT_FILENO) == 1) {
    std::cout.flush();
    std::fflush(stdout);
    write_stderr_line("");
  }
  mesh.abort_world("ending every rank after the error above");
}

PluginInstances::~PluginInstances() {
  if (data_obj) data->destroy(data_obj);
  if (strategy_obj) strategy->destroy(strategy_obj);
  if (offload_obj) offload->destroy(offload_obj);  // after the strategy: it calls the tier until destroyed
  if (optimizer_obj) optimizer->destroy(optimizer_obj);
  if (model_obj) model->destroy(model_obj);
  mesh.destroy();  // after every plugin that holds a group, before the backend they are ordered on
  if (backend_obj) backend->destroy(backend_obj);
}

}  // namespace keel
