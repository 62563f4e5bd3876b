// 1F1B, PipeDream-flush (Narayanan et al. 2021): stage s runs p-s-1 warm-up forwards, then
// alternates one forward and one backward, then drains the remaining backwards. Same bubble as
// GPipe, but at most p-s micro-batches' activations are held instead of m.
#include <algorithm>

#include "schedule_steps.hpp"
#include "schedules.hpp"

namespace keel_schedule {

std::vector<Action> build_one_f_one_b(const PipelineShape& shape) {
  std::vector<Action> actions;
  const int chunk = shape.stage;
  const int m = shape.microbatches;
  const int warmup = std::min(shape.stages - shape.stage - 1, m);
  for (int mb = 0; mb < warmup; ++mb) append_forward(actions, shape, mb, chunk);
  for (int i = 0; i < m - warmup; ++i) {
    append_forward(actions, shape, warmup + i, chunk);
    append_backward(actions, shape, i, chunk);
  }
  for (int mb = m - warmup; mb < m; ++mb) append_backward(actions, shape, mb, chunk);
  mark_last_for_chunk(actions);
  return actions;
}

}  // namespace keel_schedule
