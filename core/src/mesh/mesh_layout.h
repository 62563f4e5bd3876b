// The shape of a run's ranks (docs/architecture.md §4): pp × dp × tp, tensor parallelism
// fastest, so the ranks of one tensor-parallel group are neighbours (one node's fast links) and
// a pipeline stage is a contiguous block of ranks. `keel validate` plans it for --ranks, a run
// for the launcher's world, both through plan_mesh_layout, so they agree on every refusal.
#pragma once

#include <keel/model.h>

#include <cstdint>
#include <string>

#include "config/run_config.h"

namespace keel {

// Where one rank sits: its index along each axis.
struct MeshPosition {
  int32_t tp = 0, dp = 0, pp = 0;
};

struct MeshLayout {
  int32_t ranks = 1, tp = 1, dp = 1, pp = 1;
  int32_t virtual_stages = 1;  // model chunks per pipeline rank (interleaved schedules)
  // Expert parallelism: blocks of `ep` consecutive dp ranks split the experts; the ranks at one
  // place of every block (dp / ep of them) hold the same experts: their expert-data-parallel group.
  int32_t ep = 1;
  // Context parallelism: blocks of `cp` consecutive dp ranks split each sequence; a block reads
  // one data replica's samples (dp / cp replicas).
  int32_t cp = 1;

  MeshPosition position_of(int32_t world_rank) const {
    return {world_rank % tp, (world_rank / tp) % dp, world_rank / (tp * dp)};
  }
  int32_t ep_rank(const MeshPosition& at) const { return at.dp % ep; }          // place in the ep block
  int32_t expert_dp_rank(const MeshPosition& at) const { return at.dp / ep; }   // which ep block
  int32_t expert_dp() const { return dp / ep; }
  int32_t cp_rank(const MeshPosition& at) const { return at.dp % cp; }        // place in the cp block
  int32_t data_replica(const MeshPosition& at) const { return at.dp / cp; }   // whose samples it reads
  int32_t data_replicas() const { return dp / cp; }
  // "8 ranks = tp 2 × dp 2 × pp 2 (2 chunks per rank)"
  std::string describe() const;
};

// The layout of config's parallel section over `ranks` ranks; throws KeelError
// (KEEL_ERR_INVALID_CONFIG) when the ranks do not divide into tp × pp, or ep or cp does not
// divide the dp they leave, naming the numbers, and names what cp > 1 does not combine with yet.
MeshLayout plan_mesh_layout(const RunConfig& config, int32_t ranks);

// The model and strategy plugins must be new enough for the layout: tensor-parallel pieces came
// in ABI 0.6, pipeline chunks in 0.7, the model's expert-parallel group in 0.19 (and the
// strategy, run once over the dense parameters and once over the experts, must take a layer
// that holds none of its parameters: 0.7). Throws KeelError (KEEL_ERR_UNIMPLEMENTED) naming the
// plugin, the ABI it was built against and the one the layout needs.
void require_plugins_for_layout(const RunConfig& config, const MeshLayout& layout);

// At parallel.cp > 1 the model must say it splits sequences (model.h keel_model_info
// splits_sequences): a model that ignored cp_* would attend within each chunk alone. Throws
// KeelError (KEEL_ERR_UNIMPLEMENTED) naming the plugin.
void require_sequence_split(const RunConfig& config, const keel_model_info& info);

}  // namespace keel
