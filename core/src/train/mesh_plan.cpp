// The layout checks of `keel validate`, through the same plugin tables a run uses.
#include "train/mesh_plan.h"

#include <keel/keel.h>

#include <algorithm>
#include <string>

#include "host/errors.h"
#include "host/plural.h"
#include "loader/plugin_registry.h"
#include "mesh/launcher_check.h"
#include "mesh/mesh_layout.h"
#include "mesh/topology.h"
#include "train/batch_geometry.h"
#include "train/model_probe.h"
#include "train/schedule_lists.h"

namespace keel {

int32_t launcher_world_size() {
  const auto started_by = launcher();
  if (started_by && started_by->world > 0) return int32_t(started_by->world);
  // A Slurm batch script validating before its srun: the job's tasks are the world srun will start.
  try {
    return std::max<int32_t>(1, keel_support::batch_script_tasks());
  } catch (const keel_support::StatusError& e) {
    throw KeelError(e.code, e.what());
  }
}

std::string check_mesh_plan(const RunConfig& config, int32_t ranks) {
  const MeshLayout layout = plan_mesh_layout(config, ranks);
  require_plugins_for_layout(config, layout);
  const int32_t model_max_seq_len = probe_model_layout(config);
  const BatchGeometry batches = check_batch_geometry(config, layout.data_replicas(), layout.tp, model_max_seq_len);
  const auto* schedule = static_cast<const keel_schedule_api*>(
      PluginRegistry::instance().find(KEEL_KIND_SCHEDULE, config.schedule.plugin).info.api);
  build_checked_schedule(config, schedule, layout.dp, batches.micro_steps);  // every stage simulated, as a run does
  const std::string levels = check_dp_levels(config, layout);
  return layout.describe() + ", schedule " + config.schedule.plugin + " with " + plural(batches.micro_steps, "micro-batch", "micro-batches") +
         " per step" + (levels.empty() ? "" : ", " + levels);
}

}  // namespace keel
