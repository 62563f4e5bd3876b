// EDiT's pseudo-gradient penalty (Cheng et al., 2024, section 3.2), as we read it, per layer at each
// sync: every replica's pseudo-gradient norm is known to every rank (one all_gather of dp
// numbers), and from them alone each rank derives the same weights:
//   anomaly elimination: a replica whose norm lies more than `anomaly_z` standard deviations
//     above the layer's running mean of replica norms (exponential moving averages of the mean and
//     variance of every accepted replica's norm, over the syncs so far) gets weight 0, unless
//     every replica would;
//   weighted averaging: the others are weighted by softmax(−norm), so a replica that moved far
//     counts less; or equally with it off.
// Clipping of the averaged pseudo-gradient's norm follows the weighted all_reduce (edit_sync.cpp).
// Pure functions of numbers, tested against hand-worked cases (tests/unit/strategy).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace keel_diloco {

struct NormStatistics {
  double mean = 0, variance = 0;
  int64_t syncs = 0;  // the first few syncs only gather statistics
};

struct PenaltyOptions {
  double anomaly_z = 3.0;        // 0: no elimination
  bool weighted_average = true;  // softmax(−norm) weights; false: equal
  double smoothing = 0.9;        // of the running mean and variance
  int64_t warmup_syncs = 3;      // syncs before elimination may start
};

// The weight of each replica (summing to 1), and the statistics updated with the accepted norms.
inline std::vector<double> replica_weights(const std::vector<double>& norms, const PenaltyOptions& options,
                                           NormStatistics& stats) {
  const size_t n = norms.size();
  std::vector<char> accepted(n, 1);
  if (options.anomaly_z > 0 && stats.syncs >= options.warmup_syncs && stats.variance > 0) {
    const double limit = stats.mean + options.anomaly_z * std::sqrt(stats.variance);
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) kept += (accepted[i] = norms[i] <= limit ? 1 : 0);
    if (kept == 0) std::fill(accepted.begin(), accepted.end(), 1);
  }
  double lowest = INFINITY;
  for (size_t i = 0; i < n; ++i)
    if (accepted[i]) lowest = std::min(lowest, norms[i]);
  std::vector<double> weights(n, 0.0);
  double total = 0;
  for (size_t i = 0; i < n; ++i)
    if (accepted[i]) total += weights[i] = options.weighted_average ? std::exp(-(norms[i] - lowest)) : 1.0;
  for (double& w : weights) w /= total;
  // The statistics take in each accepted replica's norm, in rank order (the same on every rank).
  for (size_t i = 0; i < n; ++i) {
    if (!accepted[i]) continue;
    if (stats.syncs == 0 && i == size_t(std::find(accepted.begin(), accepted.end(), 1) - accepted.begin())) {
      stats.mean = norms[i];
      stats.variance = 0;
      continue;
    }
    const double deviation = norms[i] - stats.mean;
    stats.mean += (1 - options.smoothing) * deviation;
    stats.variance = options.smoothing * (stats.variance + (1 - options.smoothing) * deviation * deviation);
  }
  ++stats.syncs;
  return weights;
}

}  // namespace keel_diloco
