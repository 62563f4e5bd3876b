// Moving a mixture-of-experts layer's tokens into expert order and back (backend.h moe_permute_*,
// 0.19). Each token goes to K experts, so there are N·K (token, slot) pairs; the plan gives each
// pair its row in expert order (expert 0's pairs first, within an expert by token, then slot),
// so each expert's rows are consecutive and one matmul per expert reads them. Activations are
// fp32 here; the backend widens and rounds bf16 around these.
#pragma once

#include <cstdint>

namespace keel::cpu {

// positions(N,K) = each pair's row in expert order, counts(E) = pairs per expert. Every
// experts[i] must lie in [0,E) (the caller checks).
void moe_permute_plan(int32_t* positions,      // (N,K)
                      int64_t* counts,         // (E)
                      const int32_t* experts,  // (N,K)
                      int64_t N, int32_t E, int32_t K);

// out[positions[n,j]] = scale[n,j] · inp[n] (scale NULL: 1); every row of out is written.
void moe_permute(float* out,                // (N·K,C)
                 const float* inp,          // (N,C)
                 const float* scale,        // (N,K) or NULL
                 const int32_t* positions,  // (N,K)
                 int64_t N, int32_t K, int64_t C);

// out[n] = Σ_{j=0..K-1} scale[n,j] · inp[positions[n,j]] in that order (scale NULL: 1), overwritten.
void moe_unpermute(float* out,                // (N,C)
                   const float* inp,          // (N·K,C)
                   const float* scale,        // (N,K) or NULL
                   const int32_t* positions,  // (N,K)
                   int64_t N, int32_t K, int64_t C);

// dscale[n,j] += Σ_c dout[n,c] · inp[positions[n,j],c]: the scale's gradient of moe_unpermute.
void moe_unpermute_scale_backward(float* dscale,             // (N,K)
                                  const float* dout,         // (N,C)
                                  const float* inp,          // (N·K,C)
                                  const int32_t* positions,  // (N,K)
                                  int64_t N, int32_t K, int64_t C);

}  // namespace keel::cpu
