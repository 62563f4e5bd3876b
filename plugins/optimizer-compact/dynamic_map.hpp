// The 8-bit codes of the quantised moments: bitsandbytes' dynamic data type (Dettmers et al.,
// "8-bit Optimizers via Block-wise Quantization", 2022), 256 sorted values in [-1, 1]. For
// each decimal exponent e = 0..6 the values 10^(e-6) × the midpoints of equal steps over
// [0.1, 1] (2^e steps each sign for the signed map of the first moment, 2^(e+1) for the
// unsigned map of the second), then 0 and 1. One change to the signed map: its value closest
// to zero on the negative side (-5.5e-7) is replaced by -1, so a block's extreme value decodes
// to exactly its absmax whatever its sign, and packing a decoded state gives back its bits.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>

namespace keel_compact {

using CodeMap = std::array<float, 256>;

inline CodeMap make_dynamic_map(bool is_signed) {
  CodeMap map{};
  int at = 0;
  for (int e = 0; e < 7; ++e) {
    const int steps = is_signed ? (1 << e) : (1 << (e + 1));
    const double scale = std::pow(10.0, double(e - 6));
    for (int k = 0; k < steps; ++k) {
      const double lo = 0.1 + 0.9 * double(k) / double(steps), hi = 0.1 + 0.9 * double(k + 1) / double(steps);
      const double value = scale * (lo + hi) / 2.0;
      map[size_t(at++)] = float(value);
      if (is_signed) map[size_t(at++)] = e == 0 ? -1.0f : float(-value);
    }
  }
  map[size_t(at++)] = 0.0f;
  map[size_t(at++)] = 1.0f;
  std::sort(map.begin(), map.end());
  return map;
}

inline const CodeMap& signed_map() {
  static const CodeMap map = make_dynamic_map(true);
  return map;
}
inline const CodeMap& unsigned_map() {
  static const CodeMap map = make_dynamic_map(false);
  return map;
}

// The code of the map value nearest x (x within [-1, 1]); a tie goes to the lower code. A
// binary search of fixed depth whose steps are selects, not branches: the codes of a block's
// values are unpredictable, and a mispredicted branch per step cost most of the update.
inline uint8_t nearest_code(const CodeMap& map, float x) {
  int lower = 0;  // ends as the last code whose value is <= x (0 when none is)
  for (int half = 128; half >= 1; half >>= 1) lower = map[size_t(lower + half)] <= x ? lower + half : lower;
  if (lower == 255) return 255;
  const float below = x - map[size_t(lower)], above = map[size_t(lower + 1)] - x;
  return uint8_t(above < below ? lower + 1 : lower);
}

inline uint8_t zero_code(const CodeMap& map) { return nearest_code(map, 0.0f); }

}  // namespace keel_compact
