// SwiGLU, the Llama MLP's activation, over rows that hold the gate and up projections side by
// side (one matmul makes both): out[n,i] = silu(gate[n,i]) · up[n,i], silu(g) = g · σ(g).
#pragma once

#include <cstdint>

namespace keel::cpu {

void swiglu_forward(float* out,            // (N,F)
                    const float* gate_up,  // (N,2F): gate in columns 0..F-1, up in F..2F-1
                    int64_t N, int64_t F);

// dgate_up += ∂loss/∂gate_up for dout = ∂loss/∂out.
void swiglu_backward(float* dgate_up,       // (N,2F)
                     const float* dout,     // (N,F)
                     const float* gate_up,  // (N,2F)
                     int64_t N, int64_t F);

}  // namespace keel::cpu
