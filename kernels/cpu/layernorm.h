// LayerNorm over the last dimension (eps 1e-5), GPT-2's pre-norm, llm.c's formulation:
// forward saves each row's mean and 1/std for the backward.
#pragma once

#include <cstdint>

namespace keel::cpu {

void layernorm_forward(float* out,           // (N,C)
                       float* mean,          // (N)
                       float* rstd,          // (N)
                       const float* inp,     // (N,C)
                       const float* weight,  // (C)
                       const float* bias,    // (C)
                       int64_t N, int64_t C);

// dinp, dweight and dbias are accumulated into (+=).
void layernorm_backward(float* dinp,          // (N,C)
                        float* dweight,       // (C)
                        float* dbias,         // (C)
                        const float* dout,    // (N,C)
                        const float* inp,     // (N,C)
                        const float* weight,  // (C)
                        const float* mean,    // (N)
                        const float* rstd,    // (N)
                        int64_t N, int64_t C);

}  // namespace keel::cpu
