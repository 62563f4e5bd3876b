// The step's balancing figures (llama_moe_metrics.hpp), in double on the host.
#include "llama_moe_metrics.hpp"

#include <algorithm>
#include <numeric>
#include <string>

namespace keel_llama {

void BalanceTally::add_layer(int64_t block, const std::vector<int64_t>& counts, const std::vector<float>& scores,
                             int64_t rows) {
  if (pairs_.empty()) pairs_.assign(size_t(E_), 0.0), score_sums_.assign(size_t(E_), 0.0);
  std::vector<int64_t>& layer = layer_counts_[block];
  if (layer.empty()) layer.assign(size_t(E_), 0);
  for (int64_t e = 0; e < E_; ++e) {
    pairs_[size_t(e)] += double(counts[size_t(e)]);
    layer[size_t(e)] += counts[size_t(e)];
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < E_; ++e) score_sums_[size_t(e)] += double(scores[size_t(r * E_ + e)]);
  rows_ += double(rows);
}

void BalanceTally::add_dropped(int64_t dropped, int64_t pairs) {
  capacity_ = true;
  dropped_ += double(dropped);
  routed_ += double(pairs);
}

// transformers' load_balancing_loss_func without its coefficient: E · Σ_e f_e · P_e over the
// micro-batch's R router rows, f_e = pairs choosing e / R, P_e = Σ_rows scores[:, e] / R.
void BalanceTally::end_microbatch() {
  if (rows_ > 0) {
    double aux = 0;
    for (int64_t e = 0; e < E_; ++e) aux += (pairs_[size_t(e)] / rows_) * (score_sums_[size_t(e)] / rows_);
    aux_sum_ += double(E_) * aux;
    ++microbatches_;
  }
  std::fill(pairs_.begin(), pairs_.end(), 0.0);
  std::fill(score_sums_.begin(), score_sums_.end(), 0.0);
  rows_ = 0;
}

const std::vector<keel_support::StepMetric>& BalanceTally::take() {
  reported_.clear();
  if (microbatches_ > 0) {
    reported_.push_back({"aux_loss", aux_sum_ / double(microbatches_), KEEL_METRIC_MEAN});
    std::vector<keel_support::StepMetric> layers;
    double worst = 0;
    for (const auto& [block, counts] : layer_counts_) {
      const double total = double(std::accumulate(counts.begin(), counts.end(), int64_t{0}));
      const double load = total > 0 ? double(*std::max_element(counts.begin(), counts.end())) * double(E_) / total : 0;
      worst = std::max(worst, load);
      layers.push_back({"expert_load.layer" + std::to_string(block), load, KEEL_METRIC_MAX});
    }
    reported_.push_back({"expert_load.max_over_mean", worst, KEEL_METRIC_MAX});
    if (capacity_)  // the step's pairs the capacity factor dropped, over those routed
      reported_.push_back({"dropped_fraction", routed_ > 0 ? dropped_ / routed_ : 0.0, KEEL_METRIC_MEAN});
    if (reported_.size() + layers.size() <= KEEL_MODEL_METRICS_MAX)
      reported_.insert(reported_.end(), layers.begin(), layers.end());
  }
  aux_sum_ = 0;
  microbatches_ = 0;
  layer_counts_.clear();
  dropped_ = routed_ = 0;
  return reported_;
}

}  // namespace keel_llama
