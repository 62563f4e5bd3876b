// `keel validate`'s check of the parallel layout before any rank starts: the world divides into
// tp × dp × pp, the global batch into micro-batches per data-parallel rank, the schedule can run
// that many micro-batches on that many stages, the model can be cut into the chunks asked for,
// and every plugin is new enough for the layout. Each refusal names the numbers and the key.
#pragma once

#include <cstdint>
#include <string>

#include "config/run_config.h"

namespace keel {

// The world size `keel validate` assumes: --ranks, else the launcher's (mpirun, srun), else 1.
int32_t launcher_world_size();

// Checks the layout for `ranks` ranks; throws KeelError (KEEL_ERR_INVALID_CONFIG or
// KEEL_ERR_UNIMPLEMENTED) naming what is wrong. Returns one line describing the mesh.
std::string check_mesh_plan(const RunConfig& config, int32_t ranks);

}  // namespace keel
