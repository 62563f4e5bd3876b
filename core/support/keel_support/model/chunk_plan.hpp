// Where a model's transformer blocks sit under pipeline parallelism (the gpt and llama models;
// installed for third-party ones): the model is cut into pp_size * virtual_stages chunks of
// consecutive blocks, chunk c runs on pipeline rank c % pp_size (Megatron's interleaved
// placement), the first chunk also embeds the tokens and the last one holds the final norm and
// the output head. Pure bookkeeping, separate from the math, so that the create-time
// refusals are checked in one place.
#pragma once

#include <keel/model.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/common/json_parse.hpp"

namespace keel_support {

class ChunkPlan {
 public:
  // Not a plan yet: a model that keeps its plan as a member assigns it in its constructor. Every
  // question but pp_rank/pp_size throws until then (the block count is not known here, so there
  // is no honest "every block" to answer with); a model without pipelines uses whole(n_layer).
  ChunkPlan() = default;
  // Reads the 0.7 create fields (only as far as args.struct_size covers them: an older core
  // means pp 1) and checks them against n_layer; throws keel_support::ConfigError naming
  // parallel.pp, parallel.virtual_stages or parallel.layers_per_stage with the numbers.
  inline ChunkPlan(const keel_model_create_args& args, int32_t n_layer);
  // pp 1: one chunk holding blocks [0, n_layer), embedding and head included.
  static ChunkPlan whole(int32_t n_layer) {
    if (n_layer < 0) throw ConfigError("model.n_layer: must be at least 0, found " + std::to_string(n_layer));
    ChunkPlan plan;
    plan.first_block_ = {0, n_layer};
    return plan;
  }

  int32_t pp_rank() const { return pp_rank_; }
  int32_t pp_size() const { return pp_size_; }
  int32_t chunks() const {
    if (first_block_.empty())
      throw StatusError(KEEL_ERR_INTERNAL, "ChunkPlan: a default-constructed plan was asked about its chunks before "
                                           "the model made it; assign ChunkPlan(args, n_layer) or "
                                           "ChunkPlan::whole(n_layer) in the model's constructor");
    return static_cast<int32_t>(first_block_.size()) - 1;
  }
  int32_t last_chunk() const { return chunks() - 1; }
  bool is_mine(int32_t chunk) const { return chunk >= 0 && chunk < chunks() && chunk % pp_size_ == pp_rank_; }
  // chunk in [0, chunks()]: chunks() itself gives the end of the last chunk.
  int32_t first_block(int32_t chunk) const {
    if (chunk < 0 || chunk > chunks())
      throw StatusError(KEEL_ERR_INTERNAL, "ChunkPlan: chunk " + std::to_string(chunk) + " is outside [0, " +
                                               std::to_string(chunks()) + "]");
    return first_block_[static_cast<size_t>(chunk)];
  }
  int32_t block_count(int32_t chunk) const { return first_block(chunk + 1) - first_block(chunk); }
  // This rank embeds the tokens (chunk 0) / computes ln_f, the logits and the loss (last chunk).
  bool holds_embedding() const { return is_mine(0); }
  bool holds_head() const { return is_mine(last_chunk()); }
  // The lm_head's wte on a rank without chunk 0 is a copy of the first stage's wte.
  bool holds_wte_copy() const { return holds_head() && !holds_embedding(); }
  // Throws StatusError when `call` ("forward", "backward") names a chunk this rank does not hold.
  void require_mine(int32_t chunk, const char* call) const {
    if (!is_mine(chunk))
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(call) + ": chunk " + std::to_string(chunk) +
                                                       " is not held by pipeline rank " + std::to_string(pp_rank_) +
                                                       " of " + std::to_string(pp_size_) + " (" +
                                                       std::to_string(chunks()) + " chunks, chunk c on rank c % pp)");
  }
  bool holds_block(int32_t block) const {
    for (int32_t c = 0; c < chunks(); ++c)
      if (block >= first_block(c) && block < first_block(c + 1)) return is_mine(c);
    return false;
  }

 private:
  int32_t pp_rank_ = 0, pp_size_ = 1;
  std::vector<int32_t> first_block_;  // chunks() + 1 entries (none: not made yet): chunk c holds [first_block_[c], first_block_[c+1])
};

namespace chunk_plan_detail {

// The 0.7 fields reach to n_stage_blocks; a shorter struct comes from a core before pipelines.
inline bool has_pipeline_fields(const keel_model_create_args& args) {
  return args.struct_size >= offsetof(keel_model_create_args, n_stage_blocks) + sizeof(args.n_stage_blocks);
}

inline std::string list_text(const int32_t* values, int32_t n) {
  std::string text = "[";
  for (int32_t i = 0; i < n; ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "]";
}

}  // namespace chunk_plan_detail

ChunkPlan::ChunkPlan(const keel_model_create_args& args, int32_t n_layer) {
  int32_t virtual_stages = 1;
  const int32_t* stage_blocks = nullptr;
  int32_t n_stage_blocks = 0;
  if (chunk_plan_detail::has_pipeline_fields(args)) {
    pp_rank_ = args.pp_rank, pp_size_ = args.pp_size, virtual_stages = args.virtual_stages;
    stage_blocks = args.stage_blocks, n_stage_blocks = args.n_stage_blocks;
    // A caller that zero-fills the struct and sets no pipeline field means pp 1.
    if (pp_size_ == 0) pp_size_ = 1;
    if (virtual_stages == 0) virtual_stages = 1;
  }
  if (pp_size_ < 1 || pp_rank_ < 0 || pp_rank_ >= pp_size_)
    throw ConfigError("parallel.pp: pipeline rank " + std::to_string(pp_rank_) + " is not in [0, pp " +
                      std::to_string(pp_size_) + ")");
  if (virtual_stages < 1)
    throw ConfigError("parallel.virtual_stages: must be at least 1, found " + std::to_string(virtual_stages));
  const int32_t chunks = pp_size_ * virtual_stages;
  const std::string cut = "parallel.pp " + std::to_string(pp_size_) + " x parallel.virtual_stages " +
                          std::to_string(virtual_stages) + " = " + std::to_string(chunks) + " chunks";
  first_block_.assign(1, 0);
  if (!stage_blocks) {
    if (n_layer % chunks != 0)
      throw ConfigError(cut + " do not divide model.n_layer " + std::to_string(n_layer) +
                        " evenly; choose pp and virtual_stages whose product divides it, or list the blocks "
                        "of each chunk in parallel.layers_per_stage");
    for (int32_t c = 0; c < chunks; ++c) first_block_.push_back(first_block_.back() + n_layer / chunks);
    return;
  }
  const std::string given = "parallel.layers_per_stage " + chunk_plan_detail::list_text(stage_blocks, n_stage_blocks);
  if (n_stage_blocks != chunks)
    throw ConfigError(given + " has " + std::to_string(n_stage_blocks) + " entries; " + cut + " need " +
                      std::to_string(chunks) + " (one count of transformer blocks per chunk)");
  for (int32_t c = 0; c < chunks; ++c) {
    if (stage_blocks[c] < 1)
      throw ConfigError(given + ": entry " + std::to_string(c) + " is " + std::to_string(stage_blocks[c]) +
                        "; every chunk needs at least 1 transformer block");
    first_block_.push_back(first_block_.back() + stage_blocks[c]);
  }
  if (first_block_.back() != n_layer)
    throw ConfigError(given + " sums to " + std::to_string(first_block_.back()) + ", but model.n_layer is " +
                      std::to_string(n_layer));
}

}  // namespace keel_support
