// Token plus position embedding, GPT-2's input layer.
#pragma once

#include <cstdint>

namespace keel::cpu {

// out[b,t] = wte[tokens[b,t]] + wpe[t]. Token ids must lie in [0, vocabulary size).
void embedding_forward(float* out,            // (B,T,C)
                       const int32_t* tokens, // (B,T)
                       const float* wte,      // (Vp,C)
                       const float* wpe,      // (maxT,C), maxT ≥ T
                       int64_t B, int64_t T, int64_t C);

// dwte[tokens[b,t]] += dout[b,t]; dwpe[t] += Σ_b dout[b,t]. Either gradient may be NULL.
void embedding_backward(float* dwte,           // (Vp,C) or NULL
                        float* dwpe,           // (maxT,C) or NULL
                        const float* dout,     // (B,T,C)
                        const int32_t* tokens, // (B,T)
                        int64_t B, int64_t T, int64_t C);

}  // namespace keel::cpu
