// Gradient memory and its data-parallel reduction, for every stage. After the reduction this
// rank's chunk of each layer holds the MEAN over ranks of the gradients accumulated there:
//   stage 1: the model accumulates into a persistent full buffer; finish_reduction (the first
//            grad_sq_norm or step of the accumulation) reduce_scatters each layer into this
//            rank's chunk of that buffer, scaled by 1/dp_size.
//   stage 2/3: only the chunks are persistent; each backward pass gets a zeroed full-size
//            buffer per layer at its first acquire, and at the layer's final release its sum
//            over ranks is scaled by 1/dp_size and ADDED to the chunk, then the buffer is freed.
//            Every micro-batch reduces this way, so the chunk accumulates the mean of each
//            micro-batch's sum: Σ_m (1/N) Σ_r g(r,m) = the mean of the accumulated gradients.
#pragma once

#include <vector>

#include "backend_calls.hpp"
#include "dp_group.hpp"
#include "shard_layout.hpp"

namespace keel_zero {

class GradReduction {
 public:
  GradReduction(int32_t stage, const ShardLayout& layout, DataParallelGroup& group, BackendCalls backend);

  // The layer's full padded gradient region for a backward pass to accumulate into.
  float* open_layer(int32_t layer);
  // The layer's gradients are final for this backward pass (stage 2/3: reduced and freed).
  void close_layer(int32_t layer);
  bool is_open(int32_t layer) const { return open_[size_t(layer)]; }
  bool has_open_layer(int32_t* out_layer) const;
  // Stage 1's persistent full region of the layer; NULL in stages 2/3, which keep none.
  float* resident_layer(int32_t layer) const;

  // Makes every owned chunk hold the mean gradient; only the first call per accumulation
  // communicates (stage 1), and no layer may be open.
  void finish_reduction();
  // This rank's chunk of the layer (in the full buffer for stage 1, else in the shard buffer).
  float* owned_chunk(int32_t layer) const;
  // Σ g² over this rank's chunks (padding is zero and adds nothing).
  double local_sum_squares() const;
  // Starts a new accumulation: every persistent gradient is zeroed.
  void zero();

  // The persistent buffer: full-layout in stage 1, shard-layout in stages 2/3.
  const float* persistent() const { return persistent_.floats(); }
  int64_t persistent_elements() const { return stage_ == 1 ? layout_.full_elements : layout_.shard_elements; }

 private:
  const int32_t stage_;
  const ShardLayout& layout_;
  DataParallelGroup& group_;
  BackendCalls backend_;
  keel_support::BackendBuffer persistent_;
  std::vector<keel_support::BackendBuffer> transient_;  // stage 2/3: per open layer
  std::vector<bool> open_;
  bool reduced_ = false;
};

}  // namespace keel_zero
