// The gradient noise scale B_simple = tr(Σ) / |G|² (McCandlish et al., 2018, "An Empirical Model
// of Large-Batch Training", appendix A): the batch size past which a larger batch stops buying
// proportionally fewer steps. Each step gives two squared gradient norms for free: |G_small|²,
// each rank's gradient over its own B_small samples (averaged over the ranks), and |G_big|², the
// reduced gradient over all B_big samples. Since E|G_B|² = |G|² + tr(Σ)/B,
//   |G|²  ≈ (B_big |G_big|² − B_small |G_small|²) / (B_big − B_small)
//   tr(Σ) ≈ (|G_small|² − |G_big|²) / (1/B_small − 1/B_big)
// are unbiased; each is noisy, so both are smoothed by an exponential moving average and the
// estimate is their ratio (the paper's advice). B is counted in sequences, as data.global_batch.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace keel {

struct GradientMoments {
  double true_sq_norm;  // |G|²
  double trace;         // tr(Σ)
};

// One step's unbiased pair; b_small < b_big.
GradientMoments gradient_moments(double small_sq, double b_small, double big_sq, double b_big);

class NoiseScale {
 public:
  explicit NoiseScale(double smoothing = 0.95) : smoothing_(smoothing) {}
  // Adds one step; returns the smoothed B_simple, or NaN while the smoothed |G|² is not positive.
  double add(double small_sq, double b_small, double big_sq, double b_big);
  double value() const;
  // What a checkpoint keeps, so a resumed run continues the same averages.
  nlohmann::json state() const;
  // Throws KeelError naming `where` for anything but two finite numbers.
  void restore(const nlohmann::json& state, const std::string& where);

 private:
  double smoothing_;
  double true_sq_norm_ = 0, trace_ = 0;  // the averages, without bias correction (it cancels)
};

}  // namespace keel
