// `keel validate` asks the model plugin about the layout as a run does at start-up: it creates the
// model on the configured backend as rank 0 of parallel.tp (with sequence parallelism as set) and
// rank 0 of parallel.pp, so the model refuses what it would refuse in a run — heads or widths that
// tp does not divide, a model that cannot split or be cut, blocks the chunks do not divide, a
// model.seq_len that sequence parallelism cannot split. Cheap: a model owns no parameters and
// allocates its activations at the first forward. No other rank exists, so the model's
// tensor-parallel group is a ShapeOnlyComm.
#pragma once

#include <cstdint>

#include "config/run_config.h"

namespace keel {

// Creates, describes and destroys the model; throws KeelError with the model's own refusal,
// prefixed by the config file. Returns the model's maximum sequence length.
int32_t probe_model_layout(const RunConfig& config);

}  // namespace keel
