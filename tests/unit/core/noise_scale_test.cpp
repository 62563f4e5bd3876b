// The gradient noise scale estimate (core/src/train/noise_scale.h) against its closed form on a
// synthetic problem: per-sample gradients g = G + σ ⊙ z with z standard normal, so
// B_simple = Σ σ_i² / |G|² exactly. Ranks each average B_small samples, as data-parallel ranks
// do; the estimate from the two norms a step gives must land within 4% of the truth.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "train/noise_scale.h"

namespace {

struct Synthetic {
  std::vector<double> mean, sigma;
  double b_simple() const {
    double trace = 0, norm = 0;
    for (size_t i = 0; i < mean.size(); ++i) trace += sigma[i] * sigma[i], norm += mean[i] * mean[i];
    return trace / norm;
  }
};

Synthetic problem(size_t d) {
  Synthetic s;
  for (size_t i = 0; i < d; ++i) {
    s.mean.push_back(0.1 * std::sin(0.7 * double(i)) + 0.02);
    s.sigma.push_back(0.3 + 0.2 * double(i % 3));
  }
  return s;
}

// One step on `ranks` ranks of `per_rank` samples: the mean over ranks of each rank's squared
// norm, and the squared norm of the mean over every sample.
std::pair<double, double> step_norms(const Synthetic& s, int ranks, int per_rank, std::mt19937_64& rng) {
  std::normal_distribution<double> z;
  std::vector<double> all(s.mean.size(), 0.0);
  double small_sq = 0;
  for (int r = 0; r < ranks; ++r) {
    std::vector<double> rank(s.mean.size(), 0.0);
    for (int b = 0; b < per_rank; ++b)
      for (size_t i = 0; i < rank.size(); ++i) rank[i] += s.mean[i] + s.sigma[i] * z(rng);
    double sq = 0;
    for (size_t i = 0; i < rank.size(); ++i) {
      all[i] += rank[i];
      rank[i] /= per_rank;
      sq += rank[i] * rank[i];
    }
    small_sq += sq / ranks;
  }
  double big_sq = 0;
  for (double x : all) big_sq += (x / (ranks * per_rank)) * (x / (ranks * per_rank));
  return {small_sq, big_sq};
}

TEST(NoiseScale, MatchesTheClosedFormOnGaussianGradients) {
  const Synthetic s = problem(64);
  for (auto [ranks, per_rank] : {std::pair{2, 4}, std::pair{8, 2}, std::pair{4, 16}}) {
    std::mt19937_64 rng(42 + ranks);
    keel::NoiseScale estimate(0.999);
    for (int step = 0; step < 6000; ++step) {
      const auto [small_sq, big_sq] = step_norms(s, ranks, per_rank, rng);
      estimate.add(small_sq, per_rank, big_sq, double(ranks * per_rank));
    }
    EXPECT_NEAR(estimate.value(), s.b_simple(), 0.04 * s.b_simple()) << ranks << " ranks × " << per_rank;
  }
}

TEST(NoiseScale, EachStepsMomentsAreUnbiasedInverses) {
  // With exact expectations E|G_B|² = |G|² + tr/B the pair comes back exactly.
  const double g2 = 0.37, trace = 5.5, b_small = 3, b_big = 24;
  const keel::GradientMoments m = keel::gradient_moments(g2 + trace / b_small, b_small, g2 + trace / b_big, b_big);
  EXPECT_NEAR(m.true_sq_norm, g2, 1e-12);
  EXPECT_NEAR(m.trace, trace, 1e-12);
}

TEST(NoiseScale, StateRoundTripsAndRefusesNonNumbers) {
  keel::NoiseScale a, b;
  a.add(2.0, 4, 1.0, 16);
  a.add(3.0, 4, 1.5, 16);
  b.restore(a.state(), "ckpt");
  EXPECT_EQ(a.value(), b.value());
  b.add(2.5, 4, 1.2, 16);
  a.add(2.5, 4, 1.2, 16);
  EXPECT_EQ(a.value(), b.value());
  EXPECT_THROW(b.restore({{"true_sq_norm", "x"}, {"trace", 1}}, "ckpt"), std::exception);
  EXPECT_THROW(b.restore(nlohmann::json::array(), "ckpt"), std::exception);
}

TEST(NoiseScale, UndefinedUntilTheTrueNormIsPositive) {
  keel::NoiseScale estimate;
  EXPECT_TRUE(std::isnan(estimate.value()));
  estimate.add(1.0, 4, 2.0, 16);  // the reduced norm above the local one: |G|² estimate is positive, tr(Σ) negative
  EXPECT_FALSE(std::isnan(estimate.value()));
}

}  // namespace
