// Rotary position embedding in Hugging Face's rotate-half convention (LlamaForCausalLM): a head
// of D channels is split in halves a = x[0:D/2] and b = x[D/2:D], and pair i turns by the angle
// t · inv_freq[i] of its position t:
//   a_i' = a_i cos − b_i sin,   b_i' = b_i cos + a_i sin.
// The backward is the same turn by the opposite angle (a rotation's transpose), so both run in
// place on a buffer of rows that hold the heads side by side (q, k inside a fused qkv row).
#pragma once

#include <cstdint>

namespace keel::cpu {

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
void rope_inverse_frequencies(float* inv_freq, int64_t head_dim, double theta, const RopeScaling& scaling);

// Turns `heads` heads of head_dim channels in each of B·T rows of x (row stride `stride`
// floats, the first head at column `first`); row b·T + t is at position position0 + t.
void rope_forward(float* x, const float* inv_freq, int64_t B, int64_t T, int64_t heads, int64_t head_dim,
                  int64_t stride, int64_t first, int64_t position0);

// The gradient through rope_forward, in place: dx holds ∂loss/∂(turned x) and is left holding
// ∂loss/∂x (the turn by the opposite angle).
void rope_backward(float* dx, const float* inv_freq, int64_t B, int64_t T, int64_t heads, int64_t head_dim,
                   int64_t stride, int64_t first, int64_t position0);

}  // namespace keel::cpu
