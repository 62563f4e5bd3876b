// `keel run`: train for train.steps with progress lines, JSONL metrics, periodic validation,
// and a generated sample at the end.
#pragma once

#include <ostream>

#include "train/trainer.h"

namespace keel {

void run_training(Trainer& trainer, std::ostream& out);

}  // namespace keel
