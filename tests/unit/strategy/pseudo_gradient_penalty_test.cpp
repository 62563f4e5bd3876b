// EDiT's replica weights (plugins/strategy-diloco/pseudo_gradient_penalty.hpp) on hand-worked
// cases: softmax(−norm) weights, equal weights with weighting off, a replica whose norm is past
// mean + z·std eliminated once the statistics are warm, nobody eliminated when everyone would be,
// and the running statistics' update.
#include <gtest/gtest.h>

#include <cmath>

#include "pseudo_gradient_penalty.hpp"

namespace {

using keel_diloco::NormStatistics;
using keel_diloco::PenaltyOptions;
using keel_diloco::replica_weights;

TEST(PseudoGradientPenalty, WeightsAreSoftmaxOfNegativeNorms) {
  NormStatistics stats;
  const std::vector<double> w = replica_weights({1.0, 2.0, 3.0}, PenaltyOptions{}, stats);
  const double z = std::exp(-1.0) + std::exp(-2.0) + std::exp(-3.0);
  EXPECT_NEAR(w[0], std::exp(-1.0) / z, 1e-15);
  EXPECT_NEAR(w[1], std::exp(-2.0) / z, 1e-15);
  EXPECT_NEAR(w[2], std::exp(-3.0) / z, 1e-15);
}

TEST(PseudoGradientPenalty, EqualWeightsWithoutWeighting) {
  NormStatistics stats;
  PenaltyOptions options;
  options.weighted_average = false;
  EXPECT_EQ(replica_weights({1.0, 7.0, 3.0, 2.0}, options, stats), (std::vector<double>{0.25, 0.25, 0.25, 0.25}));
}

TEST(PseudoGradientPenalty, AnOutlierIsEliminatedOnceTheStatisticsAreWarm) {
  PenaltyOptions options;
  options.weighted_average = false;
  options.anomaly_z = 2.0;
  NormStatistics stats;
  // Three warm-up syncs of norms around 1: an outlier there is still averaged in.
  EXPECT_EQ(replica_weights({1.0, 10.0}, options, stats), (std::vector<double>{0.5, 0.5}));
  stats = NormStatistics{};
  for (int i = 0; i < 3; ++i) replica_weights({0.9, 1.1}, options, stats);
  ASSERT_EQ(stats.syncs, 3);
  ASSERT_GT(stats.variance, 0.0);
  const double limit = stats.mean + 2.0 * std::sqrt(stats.variance);
  ASSERT_LT(limit, 5.0);
  const NormStatistics before = stats;
  EXPECT_EQ(replica_weights({1.0, 5.0, 1.0}, options, stats), (std::vector<double>{0.5, 0.0, 0.5}));
  // Only the accepted norms (two of 1.0) entered the statistics.
  double mean = before.mean, variance = before.variance;
  for (int i = 0; i < 2; ++i) {
    const double d = 1.0 - mean;
    mean += 0.1 * d;
    variance = 0.9 * (variance + 0.1 * d * d);
  }
  EXPECT_DOUBLE_EQ(stats.mean, mean);
  EXPECT_DOUBLE_EQ(stats.variance, variance);
}

TEST(PseudoGradientPenalty, NobodyIsEliminatedWhenEveryoneWouldBe) {
  PenaltyOptions options;
  options.weighted_average = false;
  options.anomaly_z = 1.0;
  NormStatistics stats{1.0, 0.01, 5};
  EXPECT_EQ(replica_weights({4.0, 6.0}, options, stats), (std::vector<double>{0.5, 0.5}));
}

}  // namespace
