// bf16 as storage: the upper 16 bits of an fp32 (same sign and exponent, 7 of its 23 mantissa
// bits). The cpu backend computes every bf16 op in fp32: it widens the bf16 operands to fp32
// scratch (exact), runs the fp32 kernel, and rounds what it stores back to bf16 once.
#pragma once

#include <cstdint>
#include <cstring>

namespace keel::cpu {

using bf16 = uint16_t;  // the bit pattern; no arithmetic is ever done on it

// Exact: every bf16 is an fp32.
inline float bf16_to_float(bf16 h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest, ties to even (what a GPU's conversion does). Adding 0x7FFF plus the lowest
// kept bit carries into the kept bits exactly when the dropped half is above the halfway point,
// or at it with an odd kept part. Infinities stay; a NaN stays a (quiet) NaN rather than
// carrying into the exponent and becoming an infinity.
inline bf16 float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<bf16>((bits >> 16) | 0x0040u);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<bf16>(bits >> 16);
}

// dst[i] = src[i] widened; threads over large arrays.
void widen_bf16(float* dst,       // (n)
                const bf16* src,  // (n)
                int64_t n);

// dst[i] = src[i] rounded to nearest even.
void round_to_bf16(bf16* dst,         // (n)
                   const float* src,  // (n)
                   int64_t n);

}  // namespace keel::cpu
