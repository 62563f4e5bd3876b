// The vocabulary split over tensor-parallel ranks (Megatron's vocabulary-parallel embedding and
// cross-entropy): each rank holds a contiguous block of embedding rows / logit columns, computes
// what it can from its block, and the model combines the ranks' partial results.
#pragma once

#include <cstdint>

namespace keel::cpu {

// out[b,t] = wte_rows[tok - row_begin] when tok = tokens[b,t] lies in [row_begin, row_begin+rows),
// else 0; plus wpe[t] when wpe is not NULL. Token ids must be ≥ 0.
void embedding_rows_forward(float* out,              // (B,T,C)
                            const int32_t* tokens,   // (B,T)
                            const float* wte_rows,   // (rows,C)
                            const float* wpe,        // (maxT,C) or NULL
                            int64_t B, int64_t T, int64_t C, int64_t row_begin, int64_t rows);

// dwte_rows[tok - row_begin] += dout[b,t] for tokens in the block; dwpe[t] += Σ_b dout[b,t]
// when dwpe is not NULL.
void embedding_rows_backward(float* dwte_rows,        // (rows,C)
                             float* dwpe,             // (maxT,C) or NULL
                             const float* dout,       // (B,T,C)
                             const int32_t* tokens,   // (B,T)
                             int64_t B, int64_t T, int64_t C, int64_t row_begin, int64_t rows);

// Per row of logits(N,cols) (vocabulary columns [col_begin, col_begin+cols), the first valid_cols
// real): stats[n] = {max m of the valid columns (-inf when none), Σ exp(logit - m) over them (0
// when none), the target's logit when targets[n] lies in [col_begin, col_begin+valid_cols) else 0}.
void crossentropy_shard_stats(float* stats,            // (N,3)
                              const float* logits,     // (N,cols)
                              const int32_t* targets,  // (N)
                              int64_t N, int64_t col_begin, int64_t valid_cols, int64_t cols);

// dlogits[n, i] += (exp(logit - lse[n]) - [col_begin + i == target]) * dloss over the valid
// columns; rows whose target < 0 are left as they are.
void crossentropy_shard_backward(float* dlogits,          // (N,cols)
                                 const float* logits,     // (N,cols)
                                 const float* lse,        // (N) log Σ exp over the whole vocabulary
                                 const int32_t* targets,  // (N)
                                 float dloss, int64_t N, int64_t col_begin, int64_t valid_cols, int64_t cols);

// The same gradient written over the logits (llm.c's in-place classifier, for when the logits are
// dead after it): logits[n, i] = (exp(logit - lse[n]) - [col_begin + i == target]) * dloss over
// the valid columns, and 0 (the gradient there) in the padding columns and in rows whose target
// < 0. Each valid element has the bits crossentropy_shard_backward adds to a zeroed buffer.
void crossentropy_shard_backward_in_place(float* logits,           // (N,cols) in: logits, out: dlogits
                                          const float* lse,        // (N)
                                          const int32_t* targets,  // (N)
                                          float dloss, int64_t N, int64_t col_begin, int64_t valid_cols,
                                          int64_t cols);

// Combines the shards' statistics as a tensor-parallel model does: per row, over the n_shards
// blocks of stats, M = max m_r, S = Σ s_r·e^(m_r−M), lse = M + log S (-inf for a row no shard
// has a column of); *loss_sum += weight · Σ over rows with target ≥ 0 of (lse − Σ_r target_logit_r).
// In double throughout, one row after another, so the result does not depend on the threads,
// and *loss_sum is rounded once.
void crossentropy_combine(float* lse,              // (N)
                          float* loss_sum,         // (1)
                          const float* stats,      // (n_shards,N,3) as crossentropy_shard_stats wrote
                          int64_t n_shards,
                          const int32_t* targets,  // (N)
                          int64_t N, float weight);

}  // namespace keel::cpu
