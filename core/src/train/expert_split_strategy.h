// Expert parallelism under any strategy (parallel.ep > 1; docs/architecture.md §4). An expert's
// tensors (params.h KEEL_PARAM_EXPERT) live on the ranks of its expert-data-parallel group, not
// on the whole data-parallel group, so their gradients are reduced, and their ZeRO shards and
// optimizer state spread, over that group. Rather than teach every strategy a second group, the
// core creates the configured strategy twice behind one split (split_strategy.h): one part over
// the data-parallel group with the dense parameters, one over the expert-data-parallel group with
// the experts. The experts' share of the gradient norm is added over the ep block, their own
// arrays named apart ("experts." before the expert part's), and an offload tier shared by views.
#pragma once

#include <keel/keel.h>

#include <memory>
#include <string>

#include "mesh/mesh.h"
#include "train/split_strategy.h"

namespace keel {

class SharedTier;

class ExpertSplitStrategy : public SplitStrategy {
 public:
  // `inner`: the configured strategy's table; `args`: the create args one strategy over the whole
  // model would get (its params the model's, its dp group the data-parallel one); `expert_dp`: the
  // group the expert half runs over; `core_ep`: the core's host group over the ep block, for the
  // gradient norm. Refuses (KeelError) a strategy whose replicas step on their own, and a model
  // with no expert tensor on this rank. `config_file` and `plugin` name the config and the strategy
  // in messages. Its table is SplitStrategy::table().
  ExpertSplitStrategy(const keel_strategy_api* inner, const keel_strategy_create_args& args, const CommGroup& expert_dp,
                      const CommGroup& core_ep, const std::string& config_file, const std::string& plugin);
  ~ExpertSplitStrategy() override;

  static const keel_strategy_api* table() { return SplitStrategy::table(); }

 private:
  // The dense part's sum is the same on every dp rank; the expert part's on every rank of the
  // expert-data-parallel group, and the ep block holds different experts: added over the block.
  double join_norms(double dense, double experts) override;

  CommGroup core_ep_;
  std::unique_ptr<SharedTier> tier_;  // the core's offload tier seen by each part apart
};

// Every rank of a pipeline stage holds its stage's layers, so at pp 1 a rank with no expert
// tensor (params.h KEEL_PARAM_EXPERT) means a model with none, which would run plain data
// parallelism under an ep the config asks for: refused (KeelError naming the file and the key).
// A run checks it as it splits the strategy, `keel validate` on the model it probes.
void require_expert_tensors(const std::string& config_file, int32_t ep, int32_t pp, const keel_param_spec* params,
                            size_t n_params);

}  // namespace keel
