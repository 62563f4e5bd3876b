// Softmax cross-entropy over a padded vocabulary: logits have Vp columns (GPT-2 pads 50257 to
// 50304 for aligned matmuls) of which only the first V are real words.
#pragma once

#include <cstdint>

namespace keel::cpu {

// probs[n, :V] = softmax(logits[n, :V]); probs[n, V:Vp] = 0; probs may alias logits.
// losses[n] = -log probs[n, targets[n]], or 0 when targets[n] < 0 (ignored position).
// Targets must be < V.
void crossentropy_forward(float* losses,          // (N)
                          float* probs,           // (N,Vp)
                          const float* logits,    // (N,Vp)
                          const int32_t* targets, // (N)
                          int64_t N, int64_t V, int64_t Vp);

// dlogits[n, :V] += (probs[n, :V] - onehot(targets[n])) * dloss for rows with targets[n] ≥ 0;
// padded columns and ignored rows are left as they are.
void crossentropy_backward(float* dlogits,         // (N,Vp)
                           const float* probs,     // (N,Vp)
                           const int32_t* targets, // (N)
                           float dloss, int64_t N, int64_t V, int64_t Vp);

}  // namespace keel::cpu
