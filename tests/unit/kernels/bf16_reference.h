// An oracle for bf16 rounding that shares nothing with the backend's bit trick: the two bf16
// values around x (x's fp32 bits cut to 16, and one bf16 step further from zero) compared by
// distance in double, a tie going to the one with an even last bit. Above the largest finite
// bf16 the step further is 2^128, as IEEE rounding with an unbounded exponent has it, and
// choosing it means infinity.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace keel_test {

inline float bf16_bits_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint32_t float_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

// Both neighbours' distances from x, for a test to show that a hand-picked case is a tie.
struct Bf16Neighbours {
  uint16_t toward_zero, away;
  double distance_toward_zero, distance_away;
};
inline Bf16Neighbours bf16_neighbours(float x) {
  const uint16_t toward_zero = static_cast<uint16_t>(float_bits(x) >> 16);
  const uint16_t away = static_cast<uint16_t>(toward_zero + 1);
  const double low = bf16_bits_to_float(toward_zero);
  const double high = (away & 0x7FFF) == 0x7F80 ? std::copysign(std::ldexp(1.0, 128), x) : bf16_bits_to_float(away);
  return {toward_zero, away, std::fabs(double(x) - low), std::fabs(high - double(x))};
}

// The nearest bf16 to a finite or infinite x, ties to even (NaN is the caller's case).
inline uint16_t nearest_bf16(float x) {
  if (std::isinf(x)) return static_cast<uint16_t>(float_bits(x) >> 16);
  const Bf16Neighbours n = bf16_neighbours(x);
  if (n.distance_toward_zero != n.distance_away)
    return n.distance_toward_zero < n.distance_away ? n.toward_zero : n.away;
  return (n.toward_zero & 1) ? n.away : n.toward_zero;
}

// Random values already representable in bf16, as fp32 (f) and as bf16 bits (h): an op at bf16
// reads h, the fp32 op it is compared with reads f, and both see the same numbers.
struct Bf16Values {
  std::vector<float> f;
  std::vector<uint16_t> h;
};
inline Bf16Values bf16_values(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Bf16Values v{std::vector<float>(n), std::vector<uint16_t>(n)};
  for (size_t i = 0; i < n; ++i) {
    v.h[i] = nearest_bf16(dist(rng));
    v.f[i] = bf16_bits_to_float(v.h[i]);
  }
  return v;
}

inline std::vector<float> widen(const std::vector<uint16_t>& h) {
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = bf16_bits_to_float(h[i]);
  return f;
}

}  // namespace keel_test
