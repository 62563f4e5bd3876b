// Training with frozen tensors (params.h KEEL_PARAM_FROZEN: a LoRA fine-tune's base). The
// configured strategy is created over the tensors that train alone, so no strategy, built-in or
// third-party, ever allocates a gradient or optimizer state for the base, or steps it; the core
// holds the frozen tensors itself (frozen_params.h), and one split (split_strategy.h) serves the
// model both. The trainable part may itself be an expert split.
#pragma once

#include <keel/keel.h>

#include <functional>
#include <string>
#include <utility>

#include "train/split_strategy.h"

namespace keel {

// Whether any of the model's tensors is frozen: the core splits the strategy only then.
bool has_frozen_tensors(const keel_param_spec* params, size_t n_params);

class FrozenSplitStrategy : public SplitStrategy {
 public:
  // The strategy (table, object) over the create args it is handed: those of the whole model with
  // params narrowed to the trainable tensors.
  using CreateTrainable = std::function<std::pair<const keel_strategy_api*, void*>(const keel_strategy_create_args&)>;

  // `args`: what one strategy over the whole model would get. Refuses (KeelError, opening with
  // `who`) a model whose every tensor is frozen, and a strategy whose replicas step on their own.
  FrozenSplitStrategy(const keel_strategy_create_args& args, const CreateTrainable& create_trainable,
                      const std::string& plugin, const std::string& who);
};

}  // namespace keel
