// The expert split's two parts (expert_split_strategy.h): the configured strategy over the dense
// parameters and the data-parallel group, and again over the experts and their group.
#include "train/expert_split_strategy.h"
#include "train/expert_split_offload.h"

#include <string>

#include "host/errors.h"
#include "host/host_table.h"
#include "mesh/collectives.h"

namespace keel {
namespace {

constexpr int kDense = 0, kExperts = 1;

// Opens every message of the split: the config and the key that asked for it.
std::string message_prefix(const std::string& config_file, const CommGroup& core_ep) {
  return config_file + ": parallel.ep " + std::to_string(core_ep.size) + ": ";
}

}  // namespace

ExpertSplitStrategy::ExpertSplitStrategy(const keel_strategy_api* inner, const keel_strategy_create_args& args,
                                         const CommGroup& expert_dp, const CommGroup& core_ep,
                                         const std::string& config_file, const std::string& plugin)
    : SplitStrategy(args.params, args.n_params, args.n_layers,
                    [](const keel_param_spec& spec) { return (spec.flags & KEEL_PARAM_EXPERT) != 0; },
                    message_prefix(config_file, core_ep)),
      core_ep_(core_ep) {
  holds_whole_mask_ = 0;  // each ep place holds its own experts: nothing is whole on every rank
  const std::string who = message_prefix(config_file, core_ep);
  for (const keel_param_spec& spec : part_specs(kExperts))
    if (spec.flags & (KEEL_PARAM_STAGE_TIED | KEEL_PARAM_TIED))
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, who + "parameter " + spec.name + " is an expert's and tied, which the "
                                                       "expert-data-parallel reduction cannot sum");
  try {
    if (args.offload) tier_ = std::make_unique<SharedTier>(args.offload, args.offload_obj);
    for (int which : {kDense, kExperts}) {
      const std::vector<keel_param_spec>& specs = part_specs(which);
      if (specs.empty()) continue;
      keel_strategy_create_args part = args;
      if (tier_) {
        part.offload = SharedTier::table();
        part.offload_obj = tier_->view(which == kExperts ? "experts." : "");
      }
      part.params = specs.data();
      part.n_params = specs.size();
      if (which == kExperts) {
        part.dp_comm = expert_dp.alone() ? nullptr : expert_dp.comm;
        part.dp_comm_obj = expert_dp.alone() ? nullptr : expert_dp.obj;
        part.dp_rank = expert_dp.rank;
        part.dp_size = expert_dp.size;
        part.embedding_comm = nullptr;
        part.embedding_comm_obj = nullptr;
      }
      void* obj = nullptr;
      check_plugin(inner->create(host_table(), &part, &obj),
                   "creating strategy '" + plugin + "' over the " + (which == kExperts ? "experts" : "dense parameters"));
      attach(which, inner, obj, plugin, which == kExperts ? "experts." : "",
             who + "strategy '" + plugin + "' lets each replica step on its own, but an expert's tokens come from every "
                                           "rank of its ep block at every step; use ddp or zero with ep, or ep 1");
    }
  } catch (...) {
    destroy_parts();  // before tier_, which an attached part may use
    throw;
  }
}

// The parts use the tier to their end, so they go before it.
ExpertSplitStrategy::~ExpertSplitStrategy() { destroy_parts(); }

double ExpertSplitStrategy::join_norms(double dense, double experts) {
  return dense + sum_in_rank_order(core_ep_, experts);
}

void require_expert_tensors(const std::string& config_file, int32_t ep, int32_t pp, const keel_param_spec* params,
                            size_t n_params) {
  if (ep == 1 || pp > 1) return;
  for (size_t i = 0; i < n_params; ++i)
    if (params[i].flags & KEEL_PARAM_EXPERT) return;
  throw KeelError(KEEL_ERR_INVALID_CONFIG, config_file + ": parallel.ep " + std::to_string(ep) +
                                               ": the model declares no expert tensor (params.h KEEL_PARAM_EXPERT) to "
                                               "split over the ep ranks; set model.n_experts, or ep 1");
}

}  // namespace keel
