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

}  // namespace keel::cpu
