// Cross-entropy over a padded vocabulary (V = 37 of Vp = 40) against a double softmax:
// padded columns of probs are zero, ignored targets (< 0) give loss 0 and no gradient,
// probs may alias logits, and the backward matches finite differences of the mean loss.
#include "cpu/crossentropy.h"

#include "reference.h"

using namespace keel_test;

namespace {

constexpr int64_t N = 7, V = 37, Vp = 40;
const std::vector<int32_t> kTargets = {5, -1, 0, 36, 5, -100, 12};  // repeats, ignored, both ends

// Loss per row from logits in double; probs(N,Vp) with zero padding.
std::vector<double> crossentropy_ref(const std::vector<double>& logits, const std::vector<int32_t>& targets,
                                     std::vector<double>* probs = nullptr) {
  std::vector<double> losses(N, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double max = -1e300, sum = 0;
    for (int64_t i = 0; i < V; ++i) max = std::max(max, logits[n * Vp + i]);
    for (int64_t i = 0; i < V; ++i) sum += std::exp(logits[n * Vp + i] - max);
    if (probs)
      for (int64_t i = 0; i < Vp; ++i) (*probs)[n * Vp + i] = i < V ? std::exp(logits[n * Vp + i] - max) / sum : 0.0;
    if (targets[n] >= 0) losses[n] = -(logits[n * Vp + targets[n]] - max - std::log(sum));
  }
  return losses;
}

TEST(Crossentropy, ForwardMatchesReferenceAndZeroesPadding) {
  auto logits = random_floats(N * Vp, 1, -4.0f, 4.0f);
  std::vector<float> losses(N, 9.0f), probs(N * Vp, 9.0f);  // garbage everywhere, padding included
  keel::cpu::crossentropy_forward(losses.data(), probs.data(), logits.data(), kTargets.data(), N, V, Vp);
  std::vector<double> want_probs(N * Vp);
  auto want_losses = crossentropy_ref(to_double(logits), kTargets, &want_probs);
  expect_close(losses, want_losses, 1e-6, 1e-6, "losses");
  expect_close(probs, want_probs, 1e-7, 1e-6, "probs");
  for (int64_t n = 0; n < N; ++n) {
    if (kTargets[n] < 0) EXPECT_EQ(losses[n], 0.0f) << "ignored row " << n;
    for (int64_t i = V; i < Vp; ++i) EXPECT_EQ(probs[n * Vp + i], 0.0f) << "padding at row " << n << ", col " << i;
  }
}

TEST(Crossentropy, ProbsMayAliasLogits) {
  auto logits = random_floats(N * Vp, 2, -4.0f, 4.0f);
  std::vector<double> want_probs(N * Vp);
  auto want_losses = crossentropy_ref(to_double(logits), kTargets, &want_probs);
  std::vector<float> losses(N);
  keel::cpu::crossentropy_forward(losses.data(), logits.data(), logits.data(), kTargets.data(), N, V, Vp);
  expect_close(losses, want_losses, 1e-6, 1e-6, "losses (in place)");
  expect_close(logits, want_probs, 1e-7, 1e-6, "probs (in place)");
}

TEST(Crossentropy, BackwardAccumulatesOnlyRealColumnsOfCountedRows) {
  auto logits = random_floats(N * Vp, 3, -4.0f, 4.0f);
  std::vector<float> losses(N), probs(N * Vp);
  keel::cpu::crossentropy_forward(losses.data(), probs.data(), logits.data(), kTargets.data(), N, V, Vp);
  const float dloss = 1.0f / 5;  // the mean over the 5 counted rows
  auto dlogits = random_floats(N * Vp, 4), got = dlogits;
  keel::cpu::crossentropy_backward(got.data(), probs.data(), kTargets.data(), dloss, N, V, Vp);
  std::vector<double> want(N * Vp);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < Vp; ++i) {
      const bool counted = kTargets[n] >= 0 && i < V;  // padding and ignored rows stay as they were
      want[n * Vp + i] = dlogits[n * Vp + i] + (counted ? (double(probs[n * Vp + i]) - (i == kTargets[n])) * dloss : 0.0);
    }
  expect_close(got, want, 1e-7, 1e-6, "dlogits");
}

TEST(CrossentropyFiniteDifferences, BackwardMatchesNumericalGradientOfMeanLoss) {
  auto logits = random_floats(N * Vp, 5, -3.0f, 3.0f);
  std::vector<float> losses(N), probs(N * Vp), dlogits(N * Vp, 0.0f);
  keel::cpu::crossentropy_forward(losses.data(), probs.data(), logits.data(), kTargets.data(), N, V, Vp);
  const double dloss = 1.0 / 5;
  keel::cpu::crossentropy_backward(dlogits.data(), probs.data(), kTargets.data(), static_cast<float>(dloss), N, V, Vp);
  auto x = to_double(logits);
  auto loss = [&] {
    double l = 0;
    for (double v : crossentropy_ref(x, kTargets)) l += v * dloss;
    return l;
  };
  // Numerical gradients of padded columns and ignored rows are exactly 0; the rest O(0.1).
  expect_close(dlogits, numerical_gradient(x, loss), 1e-7, 1e-5, "dlogits vs finite differences");
}

TEST(Crossentropy, LargeRowsUseThreadsAndStayAccurate) {
  const int64_t rows = 64, vocab = 50257, padded = 50304;  // GPT-2's vocabulary
  auto logits = random_floats(rows * padded, 6, -8.0f, 8.0f);
  std::vector<int32_t> targets(rows);
  for (int64_t n = 0; n < rows; ++n) targets[n] = static_cast<int32_t>((n * 7919) % vocab);
  std::vector<float> losses(rows), probs(rows * padded);
  keel::cpu::crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), rows, vocab, padded);
  for (int64_t n = 0; n < rows; ++n) {
    double max = -1e300, sum = 0;
    for (int64_t i = 0; i < vocab; ++i) max = std::max(max, double(logits[n * padded + i]));
    for (int64_t i = 0; i < vocab; ++i) sum += std::exp(logits[n * padded + i] - max);
    const double want = std::log(sum) + max - logits[n * padded + targets[n]];
    ASSERT_NEAR(losses[n], want, 1e-4 * want) << "row " << n;  // a float sum of 50257 terms
    ASSERT_NEAR(probs[n * padded + targets[n]], std::exp(-want), 1e-4 * std::exp(-want)) << "row " << n;
  }
}

}  // namespace
