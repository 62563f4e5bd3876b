// The frozen split (frozen_split_strategy.h): the configured strategy over what trains, the core's
// FrozenParams over the rest.
#include "train/frozen_split_strategy.h"

#include "host/errors.h"
#include "train/frozen_params.h"

namespace keel {
namespace {

constexpr int kTrainable = 0, kFrozen = 1;

bool frozen(const keel_param_spec& spec) { return (spec.flags & KEEL_PARAM_FROZEN) != 0; }

}  // namespace

bool has_frozen_tensors(const keel_param_spec* params, size_t n_params) {
  for (size_t i = 0; i < n_params; ++i)
    if (frozen(params[i])) return true;
  return false;
}

FrozenSplitStrategy::FrozenSplitStrategy(const keel_strategy_create_args& args, const CreateTrainable& create_trainable,
                                         const std::string& plugin, const std::string& who)
    : SplitStrategy(args.params, args.n_params, args.n_layers, frozen, who) {
  const std::vector<keel_param_spec>& trainable = part_specs(kTrainable);
  for (const keel_param_spec& spec : trainable)
    if (spec.flags & KEEL_PARAM_NF4)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, who + spec.name + " is flagged KEEL_PARAM_NF4 but not "
                                                       "KEEL_PARAM_FROZEN: only a frozen tensor is kept in NF4");
  // Under pipeline parallelism a stage may hold only frozen tensors (a LoRA run's head stage
  // with no target module); the model as a whole trains something, which the model checks.
  if (trainable.empty() && args.pp_size <= 1)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, who + "every tensor the model declares is frozen (params.h "
                                                   "KEEL_PARAM_FROZEN): there is nothing to train");
  const std::string why = who + "strategy '" + plugin + "' lets each replica step on its own, which Keel does not "
                                                        "run beside frozen tensors; use ddp or zero";
  if (!trainable.empty()) {
    keel_strategy_create_args part = args;
    part.params = trainable.data();
    part.n_params = trainable.size();
    const auto [api, obj] = create_trainable(part);
    attach(kTrainable, api, obj, plugin, "", why);
  }
  keel_strategy_create_args held = args;
  held.params = part_specs(kFrozen).data();
  held.n_params = part_specs(kFrozen).size();
  held.offload = nullptr;
  held.offload_obj = nullptr;
  held.offload_arrays = 0;
  attach(kFrozen, FrozenParams::table(), new FrozenParams(held), "frozen tensors", "frozen.", why);
}

}  // namespace keel
