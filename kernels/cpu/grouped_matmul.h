// A mixture-of-experts layer's expert matmuls in one call (backend.h grouped_matmul_*_dt, 0.19):
// the rows of inp come in E consecutive groups, one per expert, and group e is multiplied by
// expert e's weight. Each group is one matmul_forward / matmul_backward, so each product is split
// over the threads as any other (gemm_partition.h) and its bits equal that matmul's.
#pragma once

#include <cstdint>

namespace keel::cpu {

// out rows of group e = its inp rows · weights[e]ᵀ; a group of 0 rows is skipped (its weight may
// be NULL).
void grouped_matmul_forward(float* out,                   // (M,OC), M = Σ counts
                            const float* inp,             // (M,IC)
                            const float* const* weights,  // E pointers to (OC,IC)
                            const int64_t* counts,        // (E) rows per group
                            int32_t E, int64_t IC, int64_t OC);

// Per group: dinp += dout · W_e, dweights[e] += doutᵀ · inp. dinp NULL, dweights NULL or an entry
// NULL: not wanted.
void grouped_matmul_backward(float* dinp,                  // (M,IC) or NULL
                             float* const* dweights,       // E pointers to (OC,IC), or NULL
                             const float* dout,            // (M,OC)
                             const float* inp,             // (M,IC)
                             const float* const* weights,  // E pointers to (OC,IC)
                             const int64_t* counts,        // (E)
                             int32_t E, int64_t IC, int64_t OC);

}  // namespace keel::cpu
