// Attention of a block of queries over a block of keys and values, with document boundaries and
// the softmax statistics (backend.h keel_attention_args): what packed rows and context
// parallelism need. Unlike attention.h it keeps no probabilities: the forward returns one
// log-sum-exp per query row, and the backward recomputes the probabilities from it, so a block's
// backward can run against the merged statistics of every block a query saw.
#pragma once

#include <cstdint>

namespace keel::cpu {

// fp32 views of keel_attention_args. Query t of row b is at index q_index0 + t and key s at
// kv_index0 + s; the query sees the keys at indices i - p .. i, where i is its index and p its
// position (positions[b·Tq + t], or i when positions is NULL).
struct AttentionBlock {
  int64_t B = 0, Tq = 0, Tkv = 0, NH = 0, NKV = 0, hs = 0;
  const float* q = nullptr;  // (B,Tq) rows of q_stride: NH·hs query channels first
  int64_t q_stride = 0;
  const float* kv = nullptr;  // (B,Tkv) rows of kv_stride: NKV·hs keys, then NKV·hs values
  int64_t kv_stride = 0;
  const int32_t* positions = nullptr;
  int64_t q_index0 = 0, kv_index0 = 0;
};

// out (B,Tq) rows of out_stride = the attention; lse (B,NH,Tq) = log Σ exp of each query's scaled
// scores (-inf, with out 0, for a query that sees no key of the block).
void attention_block_forward(const AttentionBlock& a, float* out, int64_t out_stride, float* lse);

// dq (q's layout) and dkv (kv's layout) += the block's gradients, given dout and the forward's
// out (out_stride) and lse. dq and dkv may interleave in one buffer (a fused qkv gradient).
void attention_block_backward(const AttentionBlock& a, const float* out, const float* dout, int64_t out_stride,
                              const float* lse, float* dq, float* dkv);

// Two attentions of the same queries over disjoint key blocks merged by their statistics
// (backend.h attention_merge_dt): out and lse (B,NH,T) become the attention over both blocks.
void attention_merge(float* out, int64_t out_stride, float* lse, const float* out_b, int64_t out_b_stride,
                     const float* lse_b, int64_t B, int64_t T, int64_t NH, int64_t hs);

}  // namespace keel::cpu
