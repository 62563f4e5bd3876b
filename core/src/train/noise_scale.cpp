// The noise-scale estimate (see noise_scale.h).
#include "train/noise_scale.h"

#include <cmath>

#include "host/errors.h"

namespace keel {

GradientMoments gradient_moments(double small_sq, double b_small, double big_sq, double b_big) {
  return {(b_big * big_sq - b_small * small_sq) / (b_big - b_small),
          (small_sq - big_sq) / (1.0 / b_small - 1.0 / b_big)};
}

double NoiseScale::add(double small_sq, double b_small, double big_sq, double b_big) {
  const GradientMoments step = gradient_moments(small_sq, b_small, big_sq, b_big);
  if (!std::isfinite(step.true_sq_norm) || !std::isfinite(step.trace)) return value();  // a skipped step
  true_sq_norm_ = smoothing_ * true_sq_norm_ + (1.0 - smoothing_) * step.true_sq_norm;
  trace_ = smoothing_ * trace_ + (1.0 - smoothing_) * step.trace;
  return value();
}

double NoiseScale::value() const { return true_sq_norm_ > 0 ? trace_ / true_sq_norm_ : NAN; }

nlohmann::json NoiseScale::state() const { return {{"true_sq_norm", true_sq_norm_}, {"trace", trace_}}; }

void NoiseScale::restore(const nlohmann::json& state, const std::string& where) {
  auto number = [&](const char* key) {
    if (!state.is_object() || !state.contains(key) || !state[key].is_number() ||
        !std::isfinite(state[key].get<double>()))
      throw KeelError(KEEL_ERR_IO, where + ": noise_scale." + key + ": expected a finite number");
    return state[key].get<double>();
  };
  true_sq_norm_ = number("true_sq_norm");
  trace_ = number("trace");
}

}  // namespace keel
