// The layout checks of `keel validate`, through the same plugin tables a run uses.
#include "train/mesh_plan.h"

#include <keel/keel.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "host/errors.h"
#include "host/host_table.h"
#include "loader/plugin_registry.h"
#include "train/batch_geometry.h"
#include "train/model_probe.h"
#include "train/schedule_lists.h"

namespace keel {
namespace {

std::string text(int64_t n) { return std::to_string(n); }

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
  const int64_t tp = config.tp, pp = config.pp, v = config.virtual_stages;
  if (ranks % (tp * pp) != 0)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, config.file + ": parallel: " + text(ranks) + " ranks do not divide into tp " +
                                                 text(tp) + " × pp " + text(pp) + "; launch a multiple of " +
                                                 text(tp * pp) + " ranks");
  const int64_t dp = ranks / (tp * pp);
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
  const int32_t model_max_seq_len = probe_model_layout(config);
  const BatchGeometry batches = check_batch_geometry(config, dp, config.tp, model_max_seq_len);
  const int32_t microbatches = batches.micro_steps;
  const auto* schedule =
      static_cast<const keel_schedule_api*>(registry.find(KEEL_KIND_SCHEDULE, config.schedule.plugin).info.api);
  build_checked_schedule(config, schedule, dp, microbatches);  // every stage simulated, as a run does
  return text(ranks) + " ranks = tp " + text(tp) + " × dp " + text(dp) + " × pp " + text(pp) +
         (v > 1 ? " (" + text(v) + " chunks per rank)" : "") + ", schedule " + config.schedule.plugin + " with " +
         text(microbatches) + " micro-batches per step";
}

}  // namespace keel
