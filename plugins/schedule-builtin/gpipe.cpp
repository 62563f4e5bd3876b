// GPipe (Huang et al. 2019): every micro-batch forward, then every micro-batch backward in the
// same order. Simplest to reason about; holds all m micro-batches' activations at once.
#include "schedule_steps.hpp"
#include "schedules.hpp"

namespace keel_schedule {

std::vector<Action> build_gpipe(const PipelineShape& shape) {
  std::vector<Action> actions;
  const int chunk = shape.stage;
  for (int mb = 0; mb < shape.microbatches; ++mb) append_forward(actions, shape, mb, chunk);
  for (int mb = 0; mb < shape.microbatches; ++mb) append_backward(actions, shape, mb, chunk);
  mark_last_for_chunk(actions);
  return actions;
}

}  // namespace keel_schedule
