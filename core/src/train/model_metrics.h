// A model's own per-step metrics (keel_model_api.step_metrics, ABI 0.19): read once per optimizer
// step and combined over the data-parallel group, each by its rule (mean or max), so every rank
// holds the same values; the reporter writes them under "model" in metrics.jsonl.
#pragma once

#include <keel/model.h>

#include <string>
#include <vector>

#include "mesh/mesh.h"

namespace keel {

struct ModelMetric {
  std::string name;
  double value = 0;
  int32_t combine = KEEL_METRIC_MEAN;
};

// Whether the model fills the step_metrics slot (a plugin built before 0.19 has none).
bool model_reports_metrics(const keel_model_api* api);

// The model's metrics of the step; empty when its step_metrics slot is NULL.
std::vector<ModelMetric> read_model_metrics(const keel_model_api* api, void* model);

// `mine` combined over `group`: collective on every rank of it, whether or not this rank's model
// reported anything, when the model has the slot. Throws KeelError naming the first rank and
// metric that differ from rank 0's names or rules.
std::vector<ModelMetric> combine_model_metrics(const CommGroup& group, const std::vector<ModelMetric>& mine);

// The pure part: each rank's metrics, in rank order, combined (the mean's sum in rank order).
std::vector<ModelMetric> combine_gathered_metrics(const std::vector<std::vector<ModelMetric>>& per_rank);

}  // namespace keel
