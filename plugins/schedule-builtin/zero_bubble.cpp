// Zero-bubble ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): 1F1B with each
// backward split into the input gradient (BACKWARD_INPUT, which the previous stage waits for)
// and the weight gradient (BACKWARD_WEIGHT, which nobody waits for). Stage s keeps up to s
// weight gradients deferred: the later stages return input gradients upstream sooner, and their
// deferred weight gradients fill the cool-down, where 1F1B leaves them idle. Activations held
// (forwarded, weight gradient not done) stay <= p, as in 1F1B: p-s in flight plus s deferred.
#include <algorithm>
#include <deque>

#include "schedule_steps.hpp"
#include "schedules.hpp"

namespace keel_schedule {

std::vector<Action> build_zero_bubble(const PipelineShape& shape) {
  std::vector<Action> actions;
  const int chunk = shape.stage;
  const int m = shape.microbatches;
  const int warmup = std::min(shape.stages - shape.stage - 1, m);
  const size_t deferred_weight_limit = static_cast<size_t>(shape.stage);
  std::deque<int> deferred_weight_microbatches;

  auto backward = [&](int mb) {
    append_backward_input(actions, shape, mb, chunk);
    deferred_weight_microbatches.push_back(mb);
    if (deferred_weight_microbatches.size() > deferred_weight_limit) {
      append_backward_weight(actions, deferred_weight_microbatches.front(), chunk);
      deferred_weight_microbatches.pop_front();
    }
  };
  for (int mb = 0; mb < warmup; ++mb) append_forward(actions, shape, mb, chunk);
  for (int i = 0; i < m - warmup; ++i) {
    append_forward(actions, shape, warmup + i, chunk);
    backward(i);
  }
  for (int mb = m - warmup; mb < m; ++mb) backward(mb);
  for (int mb : deferred_weight_microbatches) append_backward_weight(actions, mb, chunk);
  mark_last_for_chunk(actions);
  return actions;
}

}  // namespace keel_schedule
