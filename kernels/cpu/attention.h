// Causal multi-head self-attention, GPT-2 style, computed per (batch, head) with sgemm on
// row blocks so that blocks entirely above the diagonal are never computed. Forward saves the
// softmax probabilities (as llm.c's `att`), which the backward reads instead of recomputing.
#pragma once

#include <cstdint>

namespace keel::cpu {

// Floats of `att` the forward writes and the backward reads: B*NH*T*T probabilities.
int64_t attention_saved_floats(int64_t B, int64_t T, int64_t C, int64_t NH);

// q, k, v sit side by side in each row of qkv, each split into NH heads of C/NH channels;
// scores are scaled by 1/sqrt(C/NH) and masked so position t sees positions 0..t.
void attention_forward(float* out,        // (B,T,C)
                       float* att,        // (B,NH,T,T) softmax probabilities, 0 above the diagonal
                       const float* qkv,  // (B,T,3C)
                       int64_t B, int64_t T, int64_t C, int64_t NH);

// dqkv += ∂loss/∂qkv; `att` is what attention_forward wrote for this qkv.
void attention_backward(float* dqkv,        // (B,T,3C)
                        const float* dout,  // (B,T,C)
                        const float* qkv,   // (B,T,3C)
                        const float* att,   // (B,NH,T,T)
                        int64_t B, int64_t T, int64_t C, int64_t NH);

}  // namespace keel::cpu
