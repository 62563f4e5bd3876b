// ChunkPlan: the pipeline's cut of the gpt model's blocks, from the create arguments.
#include "gpt_pipeline.hpp"

#include <keel_support/json_parse.hpp>

#include <cstddef>
#include <string>

namespace keel_gpt {

using keel_support::ConfigError;

namespace {

// The 0.7 fields reach to n_stage_blocks; a shorter struct comes from a core before pipelines.
bool has_pipeline_fields(const keel_model_create_args& args) {
  return args.struct_size >= offsetof(keel_model_create_args, n_stage_blocks) + sizeof(args.n_stage_blocks);
}

std::string list_text(const int32_t* values, int32_t n) {
  std::string text = "[";
  for (int32_t i = 0; i < n; ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "]";
}

}  // namespace

ChunkPlan::ChunkPlan(const keel_model_create_args& args, int32_t n_layer) {
  int32_t virtual_stages = 1;
  const int32_t* stage_blocks = nullptr;
  int32_t n_stage_blocks = 0;
  if (has_pipeline_fields(args)) {
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
  const std::string given = "parallel.layers_per_stage " + list_text(stage_blocks, n_stage_blocks);
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

bool ChunkPlan::holds_block(int32_t block) const {
  for (int32_t c = 0; c < chunks(); ++c)
    if (block >= first_block(c) && block < first_block(c + 1)) return is_mine(c);
  return false;
}

}  // namespace keel_gpt
