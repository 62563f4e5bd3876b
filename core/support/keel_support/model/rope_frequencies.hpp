// Rotary position embedding's inverse frequencies, as a model computes them once at create and
// hands them to the backend's rope ops (backend.h, 0.9): Llama's theta^(−2i/D), with Llama 3's
// scaling when the config asks for it. Host math, shared by the llama model and the kernel
// tests; installed for third-party models.
#pragma once

#include <cmath>
#include <cstdint>

namespace keel_support {

// Llama 3's frequency scaling (config.json's rope_scaling with rope_type "llama3"): factor 0
// means none.
struct RopeScaling {
  double factor = 0.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position = 8192.0;
};

// inv_freq (D/2) for head dimension D: theta^(−2i/D), rounded to fp32 as transformers computes
// it, then scaled: wavelengths 2π/inv_freq longer than original_max_position / low_freq_factor
// are divided by `factor`, shorter than original_max_position / high_freq_factor kept, and
// those between interpolated linearly in original_max_position / wavelength.
inline void rope_inverse_frequencies(float* inv_freq, int64_t head_dim, double theta, const RopeScaling& scaling) {
  constexpr double kTwoPi = 6.283185307179586;
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    // fp32 exponent and power, as transformers' default rope init evaluates it.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float base = static_cast<float>(std::pow(static_cast<float>(theta), exponent));
    float frequency = 1.0f / base;
    if (scaling.factor > 0.0) {
      const double wavelength = kTwoPi / frequency;
      const double long_wavelength = scaling.original_max_position / scaling.low_freq_factor;
      const double short_wavelength = scaling.original_max_position / scaling.high_freq_factor;
      if (wavelength > long_wavelength) {
        frequency = static_cast<float>(frequency / scaling.factor);
      } else if (wavelength >= short_wavelength) {
        const double smooth = (scaling.original_max_position / wavelength - scaling.low_freq_factor) /
                              (scaling.high_freq_factor - scaling.low_freq_factor);
        frequency = static_cast<float>((1.0 - smooth) * frequency / scaling.factor + smooth * frequency);
      }
    }
    inv_freq[i] = frequency;
  }
}

}  // namespace keel_support
