// `keel run`: train to train.steps with progress, metrics and TensorBoard events, periodic
// validation, checkpoints on the configured cadence and at the end, and a generated sample.
#pragma once

#include <ostream>

#include "train/trainer.h"

namespace keel {

// `resumed`: the trainer was loaded from a checkpoint; its metrics file is appended to.
void run_training(Trainer& trainer, std::ostream& out, bool resumed);

}  // namespace keel
