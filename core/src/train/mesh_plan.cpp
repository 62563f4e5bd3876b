// The layout checks of `keel validate`, through the same plugin tables a run uses.
#include "train/mesh_plan.h"

#include <keel/keel.h>

#include <cstdlib>
#include <string>

#include "host/errors.h"
#include "loader/plugin_registry.h"
#include "mesh/mesh_layout.h"
#include "train/batch_geometry.h"
#include "train/model_probe.h"
#include "train/schedule_lists.h"

namespace keel {

int32_t launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"})
    if (const char* value = std::getenv(name)) {
      const long n = std::strtol(value, nullptr, 10);
      if (n >= 1 && n <= (1 << 24)) return int32_t(n);
    }
  return 1;
}

std::string check_mesh_plan(const RunConfig& config, int32_t ranks) {
  const MeshLayout layout = plan_mesh_layout(config, ranks);
  require_plugins_for_layout(config, layout);
  const int32_t model_max_seq_len = probe_model_layout(config);
  const BatchGeometry batches = check_batch_geometry(config, layout.dp, layout.tp, model_max_seq_len);
  const auto* schedule = static_cast<const keel_schedule_api*>(
      PluginRegistry::instance().find(KEEL_KIND_SCHEDULE, config.schedule.plugin).info.api);
  build_checked_schedule(config, schedule, layout.dp, batches.micro_steps);  // every stage simulated, as a run does
  return layout.describe() + ", schedule " + config.schedule.plugin + " with " + std::to_string(batches.micro_steps) +
         " micro-batches per step";
}

}  // namespace keel
