// Where the gpt model's transformer blocks sit under pipeline parallelism: the model is cut into
// pp_size * virtual_stages chunks of consecutive blocks, chunk c runs on pipeline rank c % pp_size
// (Megatron's interleaved placement), the first chunk also embeds the tokens and the last one
// holds ln_f and the lm_head. Pure bookkeeping, separate from the math, so that the create-time
// refusals are checked in one place.
#pragma once

#include <keel/model.h>

#include <cstdint>
#include <vector>

namespace keel_gpt {

class ChunkPlan {
 public:
  ChunkPlan() = default;  // pp 1: one chunk holding every block
  // Reads the 0.7 create fields (only as far as args.struct_size covers them: an older core
  // means pp 1) and checks them against n_layer; throws keel_support::ConfigError naming
  // parallel.pp, parallel.virtual_stages or parallel.layers_per_stage with the numbers.
  ChunkPlan(const keel_model_create_args& args, int32_t n_layer);

  int32_t pp_rank() const { return pp_rank_; }
  int32_t pp_size() const { return pp_size_; }
  int32_t chunks() const { return static_cast<int32_t>(first_block_.size()) - 1; }
  int32_t last_chunk() const { return chunks() - 1; }
  bool is_mine(int32_t chunk) const { return chunk >= 0 && chunk < chunks() && chunk % pp_size_ == pp_rank_; }
  int32_t first_block(int32_t chunk) const { return first_block_[static_cast<size_t>(chunk)]; }
  int32_t block_count(int32_t chunk) const { return first_block(chunk + 1) - first_block(chunk); }
  // This rank embeds the tokens (chunk 0) / computes ln_f, the logits and the loss (last chunk).
  bool holds_embedding() const { return is_mine(0); }
  bool holds_head() const { return is_mine(last_chunk()); }
  // The lm_head's wte on a rank without chunk 0 is a copy of the first stage's wte.
  bool holds_wte_copy() const { return holds_head() && !holds_embedding(); }
  bool holds_block(int32_t block) const;

 private:
  int32_t pp_rank_ = 0, pp_size_ = 1;
  std::vector<int32_t> first_block_;  // chunks() + 1 entries: chunk c holds [first_block_[c], first_block_[c+1])
};

}  // namespace keel_gpt
