// Reading a model's step metrics and combining them over a group (model_metrics.h). Each rank's
// metrics travel as one string (name, rule and the value's exact bits per line) in one gather,
// so every rank computes the same combination and, on a mismatch, the same refusal.
#include "train/model_metrics.h"

#include <algorithm>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <sstream>

#include <keel/plugin.h>

#include "host/errors.h"
#include "mesh/collectives.h"

namespace keel {
namespace {

const char* rule_name(int32_t combine) { return combine == KEEL_METRIC_MAX ? "max" : "mean"; }

std::string encode(const std::vector<ModelMetric>& metrics) {
  std::string text;
  for (const ModelMetric& m : metrics) {
    uint64_t bits = 0;
    std::memcpy(&bits, &m.value, sizeof bits);
    char value[24];
    std::snprintf(value, sizeof value, "%016" PRIx64, bits);
    text += m.name + '\t' + std::to_string(m.combine) + '\t' + value + '\n';
  }
  return text;
}

std::vector<ModelMetric> decode(const std::string& text) {
  std::vector<ModelMetric> metrics;
  std::istringstream lines(text);
  std::string name, combine, value;
  while (std::getline(lines, name, '\t') && std::getline(lines, combine, '\t') && std::getline(lines, value)) {
    const uint64_t bits = std::stoull(value, nullptr, 16);
    ModelMetric m{name, 0, std::stoi(combine)};
    std::memcpy(&m.value, &bits, sizeof bits);
    metrics.push_back(m);
  }
  return metrics;
}

std::string described(const std::vector<ModelMetric>& metrics, size_t i) {
  if (i >= metrics.size()) return "no metric " + std::to_string(i) + " (" + std::to_string(metrics.size()) + " in all)";
  return "\"" + metrics[i].name + "\" (" + rule_name(metrics[i].combine) + ")";
}

}  // namespace

bool model_reports_metrics(const keel_model_api* api) { return KEEL_HAS_SLOT(api, step_metrics); }

std::vector<ModelMetric> read_model_metrics(const keel_model_api* api, void* model) {
  if (!model_reports_metrics(api)) return {};
  keel_model_metric out[KEEL_MODEL_METRICS_MAX] = {};
  int32_t count = 0;
  check_plugin(api->step_metrics(model, out, KEEL_MODEL_METRICS_MAX, &count), "model step_metrics");
  if (count < 0 || count > KEEL_MODEL_METRICS_MAX)
    throw KeelError(KEEL_ERR_INTERNAL, "model step_metrics: reported " + std::to_string(count) + " metrics, expected 0 to " +
                                         std::to_string(KEEL_MODEL_METRICS_MAX));
  std::vector<ModelMetric> metrics;
  for (int32_t i = 0; i < count; ++i) {
    const keel_model_metric& m = out[i];
    if (!m.name || !*m.name || std::strlen(m.name) >= KEEL_MODEL_METRIC_NAME_MAX ||
        std::strpbrk(m.name, "\t\n\"\\") || (m.combine != KEEL_METRIC_MEAN && m.combine != KEEL_METRIC_MAX))
      throw KeelError(KEEL_ERR_INTERNAL, "model step_metrics: metric " + std::to_string(i) + " (" +
                                           (m.name ? "\"" + std::string(m.name) + "\"" : std::string("a NULL name")) +
                                           ", combine " + std::to_string(m.combine) + ") needs a name of 1 to " +
                                           std::to_string(KEEL_MODEL_METRIC_NAME_MAX - 1) +
                                           " letters, digits, '_' or '.' and combine KEEL_METRIC_MEAN or KEEL_METRIC_MAX");
    metrics.push_back({m.name, m.value, m.combine});
  }
  return metrics;
}

std::vector<ModelMetric> combine_gathered_metrics(const std::vector<std::vector<ModelMetric>>& per_rank) {
  if (per_rank.empty()) return {};
  const std::vector<ModelMetric>& first = per_rank.front();
  for (size_t r = 1; r < per_rank.size(); ++r) {
    const std::vector<ModelMetric>& other = per_rank[r];
    for (size_t i = 0; i < std::max(first.size(), other.size()); ++i) {
      const bool same = i < first.size() && i < other.size() && first[i].name == other[i].name &&
                        first[i].combine == other[i].combine;
      if (!same)
        throw KeelError(KEEL_ERR_INTERNAL, "model step_metrics: every data-parallel rank must report the same metrics in "
                                         "the same order; at metric " + std::to_string(i) + " rank 0 reports " +
                                             described(first, i) + " and rank " + std::to_string(r) + " reports " +
                                             described(other, i));
    }
  }
  std::vector<ModelMetric> combined = first;
  for (size_t i = 0; i < combined.size(); ++i) {
    ModelMetric& m = combined[i];
    for (size_t r = 1; r < per_rank.size(); ++r) {
      const double v = per_rank[r][i].value;
      if (m.combine == KEEL_METRIC_MAX)
        m.value = (v > m.value || v != v) ? v : m.value;  // a NaN anywhere is the max: it is never hidden
      else
        m.value += v;
    }
    if (m.combine == KEEL_METRIC_MEAN) m.value /= double(per_rank.size());
  }
  return combined;
}

std::vector<ModelMetric> combine_model_metrics(const CommGroup& group, const std::vector<ModelMetric>& mine) {
  if (group.alone()) return combine_gathered_metrics({mine});
  std::vector<std::vector<ModelMetric>> per_rank;
  for (const std::string& text : gather_strings(group, encode(mine))) per_rank.push_back(decode(text));
  return combine_gathered_metrics(per_rank);
}

}  // namespace keel
