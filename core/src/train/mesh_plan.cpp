// The layout checks of `keel validate`, through the same plugin tables a run uses.
#include "train/mesh_plan.h"

#include <keel/keel.h>

#include <cstdlib>
#include <string>

#include "host/errors.h"
#include "host/host_table.h"
#include "loader/plugin_registry.h"
#include "train/schedule_lists.h"

namespace keel {
namespace {

std::string text(int64_t n) { return std::to_string(n); }

// The model's own refusal of the split (gpt: blocks the chunks do not divide), from creating it
// on the backend as pipeline rank 0 at tp 1: cheap, since a model owns no parameters.
void check_model_cut(const RunConfig& config) {
  auto& registry = PluginRegistry::instance();
  const auto* backend = static_cast<const keel_backend_api*>(registry.find(KEEL_KIND_BACKEND, config.backend.plugin).info.api);
  const auto* model = static_cast<const keel_model_api*>(registry.find(KEEL_KIND_MODEL, config.model.plugin).info.api);
  const std::string backend_json = config.backend.json.dump(), model_json = config.model.json.dump();
  keel_backend_create_args backend_args{sizeof(backend_args), backend_json.c_str(), config.backend.json_path.c_str()};
  void* backend_obj = nullptr;
  check_plugin(backend->create(host_table(), &backend_args, &backend_obj), "creating backend '" + config.backend.plugin + "'");
  const int32_t* blocks = config.layers_per_stage.empty() ? nullptr : config.layers_per_stage.data();
  keel_model_create_args args{sizeof(args), model_json.c_str(), config.model.json_path.c_str(), backend, backend_obj,
                              0, 1, nullptr, nullptr, 0, 0, config.pp, config.virtual_stages, blocks,
                              int32_t(config.layers_per_stage.size())};
  void* model_obj = nullptr;
  const keel_status status = model->create(host_table(), &args, &model_obj);
  const std::string problem = status == KEEL_OK ? "" : last_error();
  if (model_obj) model->destroy(model_obj);
  backend->destroy(backend_obj);
  if (status != KEEL_OK) throw KeelError(status, config.file + ": " + problem);
}

}  // namespace

int32_t launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"})
    if (const char* value = std::getenv(name)) {
      const long n = std::strtol(value, nullptr, 10);
      if (n >= 1 && n <= (1 << 24)) return int32_t(n);
    }
  return 1;
}

std::string check_mesh_plan(const RunConfig& config, int32_t ranks) {
  const int32_t tp = config.tp, pp = config.pp, v = config.virtual_stages;
  if (ranks % (tp * pp) != 0)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, config.file + ": parallel: " + text(ranks) + " ranks do not divide into tp " +
                                                 text(tp) + " × pp " + text(pp) + "; launch a multiple of " +
                                                 text(tp * pp) + " ranks");
  const int32_t dp = ranks / (tp * pp);
  const int32_t per_step = config.data.micro_batch * dp;
  if (config.data.global_batch % per_step != 0)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, config.file + ": data.global_batch: " + text(config.data.global_batch) +
                                                 " sequences do not divide into micro_batch " +
                                                 text(config.data.micro_batch) + " × dp " + text(dp) +
                                                 " (= " + text(per_step) + " per micro-step)");
  const int32_t microbatches = config.data.global_batch / per_step;
  auto& registry = PluginRegistry::instance();
  for (auto [kind, section] : {std::pair<int32_t, const PluginSection*>{KEEL_KIND_MODEL, &config.model},
                               {KEEL_KIND_STRATEGY, &config.strategy}}) {
    const keel_plugin_info& info = registry.find(kind, section->plugin).info;
    const uint32_t needed = pp > 1 ? 7 : tp > 1 ? 6 : 0;
    if (info.abi_minor < needed)
      throw KeelError(KEEL_ERR_UNIMPLEMENTED, config.file + ": " + section->json_path + ".plugin '" + section->plugin +
                                                  "' was built against ABI 0." + text(info.abi_minor) + ", but " +
                                                  (pp > 1 ? "parallel.pp > 1 needs 0.7" : "parallel.tp > 1 needs 0.6"));
  }
  const auto* schedule =
      static_cast<const keel_schedule_api*>(registry.find(KEEL_KIND_SCHEDULE, config.schedule.plugin).info.api);
  build_checked_schedule(config, schedule, dp, microbatches);  // every stage simulated, as a run does
  if (pp > 1) check_model_cut(config);
  return text(ranks) + " ranks = tp " + text(tp) + " × dp " + text(dp) + " × pp " + text(pp) +
         (v > 1 ? " (" + text(v) + " chunks per rank)" : "") + ", schedule " + config.schedule.plugin + " with " +
         text(microbatches) + " micro-batches per step";
}

}  // namespace keel
