// `keel validate`'s check of the parallel layout before any rank starts: the world divides into
// tp × dp × pp, every plugin is new enough for the layout, the model accepts it (model_probe.h:
// heads and widths tp divides, the chunks pp cuts, sequence parallelism), the batch fits
// (batch_geometry.h, shared with a run's start-up), and the schedule can run that many
// micro-batches on that many stages. Each refusal names the numbers and the key.
#pragma once

#include <cstdint>
#include <string>

#include "config/run_config.h"

namespace keel {

// The world size `keel validate` assumes without --ranks: the launcher's (mpirun, srun; see
// mesh/launcher_check.h), else a Slurm job's task count in its batch script (where the job's srun
// will start that many), else 1.
int32_t launcher_world_size();

// Checks the layout for `ranks` ranks; throws KeelError (KEEL_ERR_INVALID_CONFIG or
// KEEL_ERR_UNIMPLEMENTED) naming what is wrong. Returns one line describing the mesh.
std::string check_mesh_plan(const RunConfig& config, int32_t ranks);

}  // namespace keel
