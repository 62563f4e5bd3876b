// The fully connected layer, y = x·Wᵀ + b, as in llm.c (weight stored (OC, IC), PyTorch's
// nn.Linear layout). All the work is cblas_sgemm; see blas.h for how OpenBLAS is loaded.
#pragma once

#include <cstdint>

namespace keel::cpu {

// out = inp · weightᵀ + bias; bias may be NULL.
void matmul_forward(float* out,           // (N,OC)
                    const float* inp,     // (N,IC)
                    const float* weight,  // (OC,IC)
                    const float* bias,    // (OC) or NULL
                    int64_t N, int64_t IC, int64_t OC);

// dinp += dout · weight; dweight += doutᵀ · inp; dbias += Σ_rows dout. Any output may be NULL.
void matmul_backward(float* dinp,          // (N,IC) or NULL
                     float* dweight,       // (OC,IC) or NULL
                     float* dbias,         // (OC) or NULL
                     const float* dout,    // (N,OC)
                     const float* inp,     // (N,IC)
                     const float* weight,  // (OC,IC)
                     int64_t N, int64_t IC, int64_t OC);

}  // namespace keel::cpu
