// A mixture-of-experts router's top-K choice and its gradient (backend.h moe_route, 0.19): each
// token's row of router logits becomes scores (a softmax, or a sigmoid as DeepSeek-V3), the K
// experts with the largest scores plus an optional per-expert selection bias (loss-free
// balancing: the bias changes which experts are chosen, never their weights), and those experts'
// weights, optionally renormalised to sum to one (Mixtral). All fp32: routing decides discrete
// choices, so it is not rounded to the compute type.
#pragma once

#include <cstdint>

namespace keel::cpu {

struct MoeRouteShape {
  int64_t N = 0;           // tokens
  int32_t E = 0;           // experts
  int32_t K = 0;           // experts per token, 1 <= K <= E
  bool sigmoid = false;    // scores = sigmoid(logits) instead of a softmax over each row
  bool normalize = false;  // the K weights divided by their sum (a sum of 0 leaves them 0)
};

void moe_route(float* weights,               // (N,K) the chosen experts' scores, normalised if asked
               int32_t* experts,             // (N,K) largest first, ties to the lower expert index
               float* scores,                // (N,E)
               const float* logits,          // (N,E)
               const float* selection_bias,  // (E) added to the scores for choosing only, or NULL
               const MoeRouteShape& shape);

// dlogits is OVERWRITTEN with ∂loss/∂logits for dweights = ∂loss/∂weights, plus expert_dscores[e]
// (or NULL) added to ∂loss/∂scores[n,e] of every row, plus the router z-loss's
// z_grad · ∂(lse_n²)/∂logits[n,:] = z_grad · 2 · lse_n · softmax(logits_n).
void moe_route_backward(float* dlogits,               // (N,E)
                        const float* dweights,        // (N,K)
                        const float* logits,          // (N,E)
                        const float* scores,          // (N,E) moe_route's
                        const int32_t* experts,       // (N,K) moe_route's
                        const float* expert_dscores,  // (E) or NULL
                        float z_grad, const MoeRouteShape& shape);

}  // namespace keel::cpu
