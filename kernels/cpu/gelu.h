// GELU, tanh approximation (GPT-2's): 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))).
#pragma once

#include <cstdint>

namespace keel::cpu {

void gelu_forward(float* out,        // (n)
                  const float* inp,  // (n)
                  int64_t n);

// dinp += gelu'(inp) · dout
void gelu_backward(float* dinp,       // (n)
                   const float* inp,  // (n)
                   const float* dout, // (n)
                   int64_t n);

}  // namespace keel::cpu
