// The text a run prints about itself besides its steps: the header line that says what is being
// trained on what mesh with which schedule, and the sample after the last step.
#pragma once

#include <ostream>
#include <string>

#include "train/trainer.h"

namespace keel {

// "model gpt: 811776 parameters in 50 tensors, 4 layers; batch 16 × 64 tokens …"
std::string describe_run(const Trainer& trainer);

// Generates train.sample_tokens after train.sample_prompt and prints them as they come (as text
// for a byte-level model, as token ids otherwise). Collective: every rank calls it. A stop
// signal ends it early on every rank, and it then throws StopRequested.
void print_sample(Trainer& trainer, std::ostream& out);

}  // namespace keel
