// NF4, QLoRA's 4-bit NormalFloat (Dettmers et al. 2023), in the layout bitsandbytes and torchao
// store (backend.h nf4_dequantize_dt): the one definition of the table, the blocks and the double
// quantization of the scales, shared by the core's quantizer (frozen_params.cpp) and the backends'
// dequantization. A block of 64 weights keeps its absmax; each weight, divided by it, becomes the
// index of the nearest of 16 values (quantiles of a normal distribution, exact 0 and ±1). The
// absmaxes, less their mean, are quantized again to int8 in groups of 256 blocks, each group with
// one fp32 factor: about 4.13 bits a weight in all.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace keel_support {

// The published NF4 values (bitsandbytes' and torchao's table), ascending.
inline constexpr float kNf4Table[16] = {-1.0f,
                                        -0.6961928009986877f,
                                        -0.5250730514526367f,
                                        -0.39491748809814453f,
                                        -0.28444138169288635f,
                                        -0.18477343022823334f,
                                        -0.09105003625154495f,
                                        0.0f,
                                        0.07958029955625534f,
                                        0.16093020141124725f,
                                        0.24611230194568634f,
                                        0.33791524171829224f,
                                        0.44070982933044434f,
                                        0.5626170039176941f,
                                        0.7229568362236023f,
                                        1.0f};
inline constexpr int64_t kNf4Block = 64;        // weights sharing one absmax
inline constexpr int64_t kNf4ScaleGroup = 256;  // absmaxes sharing one int8 factor

// The quantized form of n weights; the last block may be partial (as bitsandbytes pads it).
struct Nf4Tensor {
  std::vector<uint8_t> codes;         // ceil(n/2): two codes a byte, the even element's in the high nibble
  std::vector<int8_t> block_scales;   // ceil(n/64)
  std::vector<float> scale_factors;   // ceil(ceil(n/64)/256)
  float scale_mean = 0.0f;
  int64_t bytes() const { return int64_t(codes.size() + block_scales.size() + 4 * scale_factors.size() + 4); }
};

inline int64_t nf4_blocks(int64_t n) { return (n + kNf4Block - 1) / kNf4Block; }
inline int64_t nf4_scale_groups(int64_t n) { return (nf4_blocks(n) + kNf4ScaleGroup - 1) / kNf4ScaleGroup; }

// The index of the table value nearest x (the lower one on a tie), as torchao's argmin picks it.
inline uint8_t nf4_nearest(float x) {
  uint8_t best = 0;
  float best_distance = std::fabs(x - kNf4Table[0]);
  for (uint8_t i = 1; i < 16; ++i) {
    const float d = std::fabs(x - kNf4Table[i]);
    if (d < best_distance) best = i, best_distance = d;
  }
  return best;
}

// absmax_b as the scales' double quantization gives it back.
inline float nf4_block_absmax(const int8_t* block_scales, const float* scale_factors, float scale_mean, int64_t b) {
  return float(block_scales[b]) * scale_factors[b / kNf4ScaleGroup] + scale_mean;
}

// Quantizes n weights: each block of 64 (the last may be shorter) normalised by its own absmax (a
// block of zeros stays 0), then the absmaxes double-quantized: less their mean, each group of 256
// scaled so its largest magnitude maps to 128, rounded half to even, clamped to [-128, 127].
inline Nf4Tensor nf4_quantize(const float* w, int64_t n) {
  Nf4Tensor q;
  const int64_t blocks = nf4_blocks(n);
  q.codes.assign(size_t((n + 1) / 2), 0);
  std::vector<float> absmax(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t size = std::min(kNf4Block, n - b * kNf4Block);
    float m = 0.0f;
    for (int64_t i = 0; i < size; ++i) m = std::max(m, std::fabs(w[b * kNf4Block + i]));
    absmax[size_t(b)] = m;
    for (int64_t i = 0; i < size; ++i) {
      const int64_t at = b * kNf4Block + i;
      const uint8_t code = nf4_nearest(m > 0.0f ? w[at] / m : 0.0f);
      q.codes[size_t(at / 2)] |= uint8_t(at % 2 == 0 ? code << 4 : code);
    }
  }
  double sum = 0.0;
  for (float m : absmax) sum += m;
  q.scale_mean = blocks ? float(sum / double(blocks)) : 0.0f;
  q.block_scales.assign(size_t(blocks), 0);
  q.scale_factors.assign(size_t(nf4_scale_groups(n)), 0.0f);
  for (int64_t g = 0; g < int64_t(q.scale_factors.size()); ++g) {
    const int64_t first = g * kNf4ScaleGroup, last = std::min(blocks, first + kNf4ScaleGroup);
    float largest = 0.0f;
    for (int64_t b = first; b < last; ++b) largest = std::max(largest, std::fabs(absmax[size_t(b)] - q.scale_mean));
    if (largest == 0.0f) continue;  // every absmax equals the mean: scales 0, factor 0
    const float factor = 256.0f / (2.0f * largest);
    for (int64_t b = first; b < last; ++b) {
      const float scaled = std::nearbyint((absmax[size_t(b)] - q.scale_mean) * factor);
      q.block_scales[size_t(b)] = int8_t(std::clamp(scaled, -128.0f, 127.0f));
    }
    q.scale_factors[size_t(g)] = 1.0f / factor;
  }
  return q;
}

// out[i - begin] = the dequantized weight i, for i in [begin, end).
inline void nf4_dequantize(float* out, const uint8_t* codes, const int8_t* block_scales, const float* scale_factors,
                           float scale_mean, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const uint8_t byte = codes[i / 2];
    const uint8_t code = i % 2 == 0 ? uint8_t(byte >> 4) : uint8_t(byte & 15);
    out[i - begin] = kNf4Table[code] * nf4_block_absmax(block_scales, scale_factors, scale_mean, i / kNf4Block);
  }
}

}  // namespace keel_support
