// 8-bit AdamW: torch.optim.AdamW's update (kernels/cpu/optimizer_update.h's rule) with both
// moments stored as 8-bit codes of the dynamic map, scaled per block of 2048 elements by the
// block's largest magnitude (bitsandbytes' blockwise scheme). A step decodes a block's moments,
// updates them in fp32, updates the parameters from those fp32 moments, then encodes them
// again against the block's new absmax. Blocks count from the range's first element.
//
// The packed buffer of a range of n elements, nb = ceil(n / 2048) blocks:
//   float absmax_m[nb], absmax_v[nb]; uint8 code_m[n], code_v[n]
// All-zero bytes are the zero state (absmax 0 decodes every code to 0).
#pragma once

#include <keel/optimizer.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "dynamic_map.hpp"

namespace keel_compact {

constexpr int64_t kBlock = 2048;

struct BlockwiseLayout {
  int64_t n, blocks;
  explicit BlockwiseLayout(int64_t elements) : n(elements), blocks((elements + kBlock - 1) / kBlock) {}
  int64_t bytes() const { return 2 * blocks * int64_t(sizeof(float)) + 2 * n; }
  // Views into a packed buffer.
  float* absmax_m(unsigned char* p) const { return reinterpret_cast<float*>(p); }
  float* absmax_v(unsigned char* p) const { return reinterpret_cast<float*>(p) + blocks; }
  uint8_t* code_m(unsigned char* p) const { return p + 2 * blocks * sizeof(float); }
  uint8_t* code_v(unsigned char* p) const { return code_m(p) + n; }
};

inline float decode(const CodeMap& map, uint8_t code, float absmax) { return absmax == 0.0f ? 0.0f : map[code] * absmax; }

// Encodes values[0, count) against their largest magnitude; returns it. A positive value never
// takes the zero code of the unsigned map (v): an element whose gradient then vanishes would
// divide its m by eps alone. A block holding a non-finite value gets absmax NaN and code 0
// throughout, so it decodes to NaN, as fp32 state would show the divergence, and encodes so again.
inline float encode_block(const CodeMap& map, const float* values, int64_t count, uint8_t* codes) {
  float absmax = 0.0f;
  for (int64_t i = 0; i < count; ++i) {
    if (!std::isfinite(values[i])) {
      std::fill(codes, codes + count, uint8_t(0));
      return NAN;
    }
    absmax = std::max(absmax, std::fabs(values[i]));
  }
  const uint8_t zero = zero_code(map);
  const bool is_unsigned = map[0] == 0.0f;
  for (int64_t i = 0; i < count; ++i) {
    if (absmax == 0.0f) {
      codes[i] = zero;
      continue;
    }
    codes[i] = nearest_code(map, values[i] / absmax);
    if (is_unsigned && codes[i] == zero && values[i] > 0.0f) codes[i] = uint8_t(zero + 1);
  }
  return absmax;
}

struct AdamwHyper {
  double lr, beta1, beta2, eps, weight_decay, grad_scale;
  int64_t step;
};

inline void blockwise_adamw_update(float* params, const float* grads, unsigned char* packed, int64_t n,
                                   const AdamwHyper& h) {
  const BlockwiseLayout layout(n);
  const CodeMap& ms = signed_map();
  const CodeMap& vs = unsigned_map();
  // The same per-call scalars and arithmetic as the fp32 rule (kernels/cpu/optimizer_update.h).
  const double bias1 = 1.0 - std::pow(h.beta1, double(h.step));
  const double bias2 = 1.0 - std::pow(h.beta2, double(h.step));
  const float step_size = float(h.lr / bias1), bias2_sqrt = float(std::sqrt(bias2));
  const float beta2 = float(h.beta2), one_minus_beta1 = float(1.0 - h.beta1), one_minus_beta2 = float(1.0 - h.beta2),
              eps = float(h.eps), scale = float(h.grad_scale), decay = float(1.0 - h.lr * h.weight_decay);
  float* absmax_m = layout.absmax_m(packed);
  float* absmax_v = layout.absmax_v(packed);
  uint8_t* code_m = layout.code_m(packed);
  uint8_t* code_v = layout.code_v(packed);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < layout.blocks; ++b) {
    float m[kBlock], v[kBlock];
    const int64_t first = b * kBlock, count = std::min(kBlock, n - first);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t e = first + i;
      const float g = grads[e] * scale;
      const float m_old = decode(ms, code_m[e], absmax_m[b]), v_old = decode(vs, code_v[e], absmax_v[b]);
      m[i] = m_old + one_minus_beta1 * (g - m_old);
      v[i] = beta2 * v_old + one_minus_beta2 * g * g;
      const float denom = std::sqrt(v[i]) / bias2_sqrt + eps;
      params[e] = params[e] * decay - step_size * m[i] / denom;
    }
    absmax_m[b] = encode_block(ms, m, count, code_m + first);
    absmax_v[b] = encode_block(vs, v, count, code_v + first);
  }
}

// The exchange form: m and v decoded, one float each per element.
inline void blockwise_unpack(const unsigned char* packed, int64_t n, float* m, float* v) {
  const BlockwiseLayout layout(n);
  unsigned char* p = const_cast<unsigned char*>(packed);
  for (int64_t e = 0; e < n; ++e) {
    const int64_t b = e / kBlock;
    m[e] = decode(signed_map(), layout.code_m(p)[e], layout.absmax_m(p)[b]);
    v[e] = decode(unsigned_map(), layout.code_v(p)[e], layout.absmax_v(p)[b]);
  }
}

inline void blockwise_pack(const float* m, const float* v, int64_t n, unsigned char* packed) {
  const BlockwiseLayout layout(n);
  for (int64_t b = 0; b < layout.blocks; ++b) {
    const int64_t first = b * kBlock, count = std::min(kBlock, n - first);
    layout.absmax_m(packed)[b] = encode_block(signed_map(), m + first, count, layout.code_m(packed) + first);
    layout.absmax_v(packed)[b] = encode_block(unsigned_map(), v + first, count, layout.code_v(packed) + first);
  }
}

}  // namespace keel_compact
