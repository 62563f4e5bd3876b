// Everything of a run that a checkpoint saves and a resume restores, other than its position
// (run_position.h, values the trainer hands over and takes back): the config it was built from,
// the parameters' specs, the optimizer's state slot count, the mesh, the strategy's ranges and
// own arrays. Checkpoint code takes this view, never the trainer, so it cannot reach into training.
#pragma once

#include <keel/keel.h>

#include "config/run_config.h"
#include "mesh/mesh.h"
#include "train/model_state.h"
#include "train/strategy_state.h"

namespace keel {

struct RunStateView {
  const RunConfig& config;
  const keel_model_info& model;  // this rank's pieces (widened specs)
  int32_t state_slots;           // the optimizer's state arrays per parameter
  const Mesh& mesh;
  StrategyState& strategy;
  ModelState& model_state;  // the model's rule-moved arrays (model.h 0.19 own_state_*)
};

}  // namespace keel
