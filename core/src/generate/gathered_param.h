// A whole parameter on every rank, whatever the layout (embed.h keel_trainer_gather_param):
// what reading a trained model by name needs when its pieces live on other ranks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/trainer.h"

namespace keel {

struct GatheredParam {
  std::vector<int64_t> shape;
  std::vector<float> values;  // row-major, empty when only the shape was asked for
};

// Parameter `name` of `trainer` whole on every rank: its shape, and its values when asked.
// Collective over the world; KeelError NOT_FOUND on every rank when no rank has it.
GatheredParam gather_param(Trainer& trainer, const std::string& name, bool with_values);

}  // namespace keel
