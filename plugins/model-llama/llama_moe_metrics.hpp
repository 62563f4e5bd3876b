// The llama model's balancing figures of one optimizer step, reported through step_metrics
// (model.h, ABI 0.19): transformers' load-balancing loss before its coefficient (aux_loss, the
// mean over the step's micro-batches) and each sparse layer's expert load, the busiest expert's
// pairs over the mean pairs per expert (1 is perfect balance; k·rows/E is the mean), from the
// routing counts the model already holds on the host and the router scores copied there.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include <keel_support/model/model_slots.hpp>  // defines: StepMetric

namespace keel_llama {

class BalanceTally {
 public:
  explicit BalanceTally(int64_t n_experts) : E_(n_experts) {}
  // One sparse layer of a micro-batch: its pairs per expert (E) and its router scores (rows, E).
  void add_layer(int64_t block, const std::vector<int64_t>& counts, const std::vector<float>& scores, int64_t rows);
  // A sparse layer's pairs dropped by the capacity factor, of `pairs` routed (called only with one).
  void add_dropped(int64_t dropped, int64_t pairs);
  // After a micro-batch's sparse layers: its aux_loss joins the step's mean.
  void end_microbatch();
  // The step's metrics (aux_loss, expert_load.max_over_mean: the worst layer's, then
  // expert_load.layer<N> per sparse layer while the names fit KEEL_MODEL_METRICS_MAX); starts afresh.
  // Nothing before the first backward: an empty step.
  const std::vector<keel_support::StepMetric>& take();

 private:
  int64_t E_;
  std::vector<double> pairs_, score_sums_;  // (E) this micro-batch, over its sparse layers
  double rows_ = 0;                          // router rows this micro-batch: sparse layers · N
  double aux_sum_ = 0;                       // over the step's micro-batches
  int64_t microbatches_ = 0;
  std::map<int64_t, std::vector<int64_t>> layer_counts_;  // by block: pairs per expert over the step
  double dropped_ = 0, routed_ = 0;                       // capacity drops over the step
  bool capacity_ = false;                                 // add_dropped was ever called: report dropped_fraction
  std::vector<keel_support::StepMetric> reported_;
};

}  // namespace keel_llama
