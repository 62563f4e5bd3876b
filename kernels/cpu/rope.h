// Rotary position embedding in Hugging Face's rotate-half convention (LlamaForCausalLM): a head
// of D channels is split in halves a = x[0:D/2] and b = x[D/2:D], and pair i turns by the angle
// t · inv_freq[i] of its position t:
//   a_i' = a_i cos − b_i sin,   b_i' = b_i cos + a_i sin.
// The backward is the same turn by the opposite angle (a rotation's transpose), so both run in
// place on a buffer of rows that hold the heads side by side (q, k inside a fused qkv row). The
// frequencies come from the model (keel_support/model/rope_frequencies.hpp).
#pragma once

#include <cstdint>

namespace keel::cpu {

// Turns `heads` heads of head_dim channels in each of B·T rows of x (row stride `stride`
// floats, the first head at column `first`); row b·T + t is at position position0 + t.
void rope_forward(float* x, const float* inv_freq, int64_t B, int64_t T, int64_t heads, int64_t head_dim,
                  int64_t stride, int64_t first, int64_t position0);

// The gradient through rope_forward, in place: dx holds ∂loss/∂(turned x) and is left holding
// ∂loss/∂x (the turn by the opposite angle).
void rope_backward(float* dx, const float* inv_freq, int64_t B, int64_t T, int64_t heads, int64_t head_dim,
                   int64_t stride, int64_t first, int64_t position0);

// As rope_forward and rope_backward, but row r (of B·T) is at position positions[r]: a packed row's
// documents each start at 0.
void rope_forward_at(float* x, const float* inv_freq, const int32_t* positions, int64_t B, int64_t T, int64_t heads,
                     int64_t head_dim, int64_t stride, int64_t first);
void rope_backward_at(float* dx, const float* inv_freq, const int32_t* positions, int64_t B, int64_t T, int64_t heads,
                      int64_t head_dim, int64_t stride, int64_t first);

}  // namespace keel::cpu
