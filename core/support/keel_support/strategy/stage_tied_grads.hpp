// Pipeline parallelism as a strategy sees it (ABI 0.7): this rank's pipeline position from the
// create args (older args mean pp 1), and the sum of the STAGE_TIED gradients over the
// embedding group. The first and last stage each hold a copy of a parameter used on both
// (GPT-2's wte: the embedding there, the lm_head here); summing the two copies' full local
// gradients before the data-parallel reduction gives both stages bit-identical gradients
// (a + b == b + a), so the copies take identical optimizer steps.
//
// When: once per step, at the strategy's first grad_sq_norm or step after the backwards, on the
// training thread, before its data-parallel reduction of the tied layers. Not at the tied
// layer's final release: the last stage releases its lm_head copy inside its last backward,
// before the core sends that backward's input gradient down the pipeline, so a blocking sum
// there would wait for a first stage that waits for that very gradient. By grad_sq_norm every
// stage is done with its backwards (and a later layer's reduction may overlap as before).
#pragma once

#include <keel/comm.h>
#include <keel/params.h>
#include <keel/plugin.h>
#include <keel/strategy.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/common/backend_ops.hpp"
#include "keel_support/strategy/param_specs.hpp"
#include "keel_support/strategy/store_layout.hpp"

namespace keel_support {

struct PipelinePosition {
  int32_t rank = 0;
  int32_t size = 1;
  const keel_comm_api* embedding_comm = nullptr;  // NULL on a rank that holds no STAGE_TIED copy
  void* embedding_comm_obj = nullptr;
};

// Args from before 0.7 (or a zero-initialised pp_size) mean a single stage and no embedding group.
inline PipelinePosition pipeline_position(const keel_strategy_create_args& args) {
  PipelinePosition pp;
  if (args.struct_size < offsetof(keel_strategy_create_args, embedding_comm_obj) + sizeof(args.embedding_comm_obj))
    return pp;
  pp.embedding_comm = args.embedding_comm;
  pp.embedding_comm_obj = args.embedding_comm_obj;
  if (args.pp_size == 0 && args.pp_rank == 0) return pp;
  if (args.pp_size < 1 || args.pp_rank < 0 || args.pp_rank >= args.pp_size)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: pp_rank " + std::to_string(args.pp_rank) +
                                                     " is outside a pipeline of " + std::to_string(args.pp_size) +
                                                     " stages (pp_size)");
  pp.rank = args.pp_rank;
  pp.size = args.pp_size;
  return pp;
}

inline bool is_stage_tied(const keel_param_spec& spec) { return (spec.flags & KEEL_PARAM_STAGE_TIED) != 0; }
inline bool is_stage_copy(const keel_param_spec& spec) { return (spec.flags & KEEL_PARAM_STAGE_COPY) != 0; }

class StageTiedGrads {
 public:
  // Finds this rank's STAGE_TIED parameters and checks the embedding group they need; the sum
  // is active only at pp_size > 1 (at pp 1 a flag has no second copy to meet).
  StageTiedGrads(const keel_strategy_create_args& args, const StoreLayout& layout, BackendOps backend)
      : pp_(pipeline_position(args)), layout_(layout), backend_(backend), layer_holds_(layout.layers.size(), 0) {
    if (pp_.size <= 1) return;
    for (size_t i = 0; i < args.n_params; ++i)
      if (is_stage_tied(args.params[i])) {
        indices_.push_back(i);
        layer_holds_[size_t(args.params[i].layer)] = 1;
      }
    if (indices_.empty()) return;
    const std::string first = spec_label(args.params[indices_.front()], indices_.front());
    if (!pp_.embedding_comm || !pp_.embedding_comm_obj)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                        "create: " + first + " is flagged STAGE_TIED on pipeline stage " + std::to_string(pp_.rank) +
                            " of " + std::to_string(pp_.size) +
                            ", but embedding_comm is NULL: its gradient must be summed with the other stage's copy "
                            "over the embedding group (strategy.h create args embedding_comm)");
    if (!KEEL_HAS_SLOT(pp_.embedding_comm, all_reduce) || !KEEL_HAS_SLOT(pp_.embedding_comm, size))
      throw StatusError(KEEL_ERR_UNIMPLEMENTED,
                        "the embedding communicator lacks the \"all_reduce\" or \"size\" slot the STAGE_TIED sum needs");
    int32_t ranks = 0;
    check_callee(pp_.embedding_comm->size(pp_.embedding_comm_obj, &ranks), "embedding comm size");
    if (ranks != 2)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: the embedding communicator has " + std::to_string(ranks) +
                                                       " ranks; expected 2 (the first and the last pipeline stage)");
    // Both stages issue their all_reduces in name order, whatever their layer order.
    std::sort(indices_.begin(), indices_.end(), [&](size_t a, size_t b) {
      return std::strcmp(args.params[a].name ? args.params[a].name : "", args.params[b].name ? args.params[b].name : "") < 0;
    });
  }

  const PipelinePosition& pipeline() const { return pp_; }
  bool active() const { return !indices_.empty(); }
  // The layer holds a parameter whose gradient is summed over the stages (so its data-parallel
  // reduction waits for that sum).
  bool holds_tied(int32_t layer) const { return active() && layer_holds_[size_t(layer)] != 0; }
  const std::vector<size_t>& indices() const { return indices_; }

  // All-reduces (SUM, fp32, in place, blocking) each STAGE_TIED parameter's full local gradient,
  // found at grad_of(index), over the embedding group. Call once per step.
  void sum_over_stages(const std::function<float*(size_t index)>& grad_of) const {
    if (!active()) return;
    backend_.synchronize();  // the backward's writes land before the communicator reads them
    for (size_t index : indices_) {
      const int64_t numel = layout_.params[index].numel;
      if (numel == 0) continue;
      float* grad = grad_of(index);
      check_callee(pp_.embedding_comm->all_reduce(pp_.embedding_comm_obj, grad, grad, size_t(numel),
                                                  keel_dtype{KEEL_DTYPE_FLOAT, 32, 1}, KEEL_REDUCE_SUM, nullptr),
                   "embedding-group all_reduce of a STAGE_TIED gradient");
    }
  }

 private:
  PipelinePosition pp_;
  const StoreLayout& layout_;
  BackendOps backend_;
  std::vector<size_t> indices_;     // STAGE_TIED parameters, by name
  std::vector<char> layer_holds_;   // per layer: holds one of them
};

}  // namespace keel_support
