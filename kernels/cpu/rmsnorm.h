// RMSNorm over the last dimension, Llama's pre-norm: out = (x · rstd) · weight with
// rstd = 1/sqrt(mean(x²) + eps); no centring, no bias. The forward saves each row's rstd for
// the backward, as layernorm saves its mean and rstd.
#pragma once

#include <cstdint>

namespace keel::cpu {

void rmsnorm_forward(float* out,           // (N,C)
                     float* rstd,          // (N)
                     const float* inp,     // (N,C)
                     const float* weight,  // (C)
                     int64_t N, int64_t C, float eps);

// dinp and dweight are accumulated into (+=).
void rmsnorm_backward(float* dinp,          // (N,C)
                      float* dweight,       // (C)
                      const float* dout,    // (N,C)
                      const float* inp,     // (N,C)
                      const float* weight,  // (C)
                      const float* rstd,    // (N)
                      int64_t N, int64_t C);

}  // namespace keel::cpu
