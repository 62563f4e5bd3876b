// Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021, "virtual stages"): each rank holds v
// chunks s, s+p, ..., and walks micro-batches in groups of p, cycling through its chunks, so the
// bubble shrinks by v at the price of v times more transfers. Mirrors Megatron's
// forward_backward_pipelining_with_interleaving: the same virtual index -> (chunk, micro-batch)
// mapping, the same warm-up count, the same all-warm-up special case when m == p.
#include <algorithm>

#include "schedule_steps.hpp"
#include "schedules.hpp"

namespace keel_schedule {

namespace {

// The k-th forward (or backward) of this rank, counting over all its chunks: micro-batches go
// in groups of p; inside a group, every local chunk in turn (backwards from the last chunk).
struct VirtualStep {
  int microbatch;
  int chunk;
};

VirtualStep virtual_step(const PipelineShape& shape, int k, bool forward) {
  const int p = shape.stages;
  const int group_size = p * shape.virtual_stages;
  int local_chunk = (k % group_size) / p;
  if (!forward) local_chunk = shape.virtual_stages - 1 - local_chunk;
  return {(k / group_size) * p + k % p, shape.chunk_of_local(local_chunk)};
}

}  // namespace

std::vector<Action> build_interleaved(const PipelineShape& shape) {
  const int p = shape.stages, s = shape.stage, v = shape.virtual_stages;
  const int total = shape.microbatches * v;
  // With m == p Megatron runs every forward first; kept so that these lists are Megatron's.
  // (Under the simulator's buffered sends, the general warm-up count is deadlock-free too.)
  int warmup = total;
  if (shape.microbatches != p) warmup = std::min(total, (p - s - 1) * 2 + (v - 1) * p);

  std::vector<Action> actions;
  auto forward = [&](int k) {
    auto step = virtual_step(shape, k, true);
    append_forward(actions, shape, step.microbatch, step.chunk);
  };
  auto backward = [&](int k) {
    auto step = virtual_step(shape, k, false);
    append_backward(actions, shape, step.microbatch, step.chunk);
  };
  for (int k = 0; k < warmup; ++k) forward(k);
  for (int k = 0; k < total - warmup; ++k) {
    forward(warmup + k);
    backward(k);
  }
  for (int k = total - warmup; k < total; ++k) backward(k);
  mark_last_for_chunk(actions);
  return actions;
}

}  // namespace keel_schedule
