// Causal self-attention (GPT-2's multi-head, or Llama's grouped-query), computed per (batch, head) with sgemm on
// row blocks so that blocks entirely above the diagonal are never computed. Forward saves the
// softmax probabilities (as llm.c's `att`), which the backward reads instead of recomputing.
#pragma once

#include <cstdint>

namespace keel::cpu {

// Floats of `att` the forward writes and the backward reads: B*NH*T*T probabilities.
int64_t attention_saved_floats(int64_t B, int64_t T, int64_t C, int64_t NH);

// q, k, v sit side by side in each row of qkv: q as NH heads of hs = C/NH channels, then k and
// v as NKV heads each (grouped-query attention: query head h reads key/value head h / (NH/NKV);
// NKV = NH is GPT-2's multi-head attention, NKV = 1 multi-query). Scores are scaled by
// 1/sqrt(hs) and masked so position t sees positions 0..t.
void attention_forward(float* out,        // (B,T,C)
                       float* att,        // (B,NH,T,T) softmax probabilities, 0 above the diagonal
                       const float* qkv,  // (B,T,C + 2·NKV·hs)
                       int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV);

// Decoding with a key/value cache: writes the T new positions' keys and values (qkv as
// attention_forward's, positions past .. past+T-1) into k_cache and v_cache, each
// (B, NKV, capacity, hs), then out(B,T,C) = causal attention of the new queries over cached
// positions 0 .. past+t. Needs past + T <= capacity.
void attention_decode(float* out, float* k_cache, float* v_cache, const float* qkv, int64_t B, int64_t T, int64_t C,
                      int64_t NH, int64_t NKV, int64_t past, int64_t capacity);

// dqkv += ∂loss/∂qkv; `att` is what attention_forward wrote for this qkv.
void attention_backward(float* dqkv,        // (B,T,C + 2·NKV·hs)
                        const float* dout,  // (B,T,C)
                        const float* qkv,   // (B,T,C + 2·NKV·hs)
                        const float* att,   // (B,NH,T,T)
                        int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV);

}  // namespace keel::cpu
