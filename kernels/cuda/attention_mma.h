// The tensor-core attention kernels (attention_mma.cu): bf16, head size 64. attention_forward.cu
// and attention_backward.cu take them where attention_mma_applies, their scalar kernels otherwise.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "cuda/kernels.h"

namespace keel::cuda {

// bf16, C = 64·NH, B·NH and B·NKV within a grid's second dimension, every pointer 16-byte aligned.
bool attention_mma_applies(Elem e, int64_t B, int64_t T, int64_t C, int64_t NH,
                           std::initializer_list<const void*> pointers);

// As attention_forward, bf16.
void attention_forward_mma(void* out, float* lse, const void* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                           int64_t NKV, cudaStream_t stream);

// As attention_backward after its rowdot: dqkv += the gradients, bf16.
void attention_backward_mma(void* dqkv, const void* dout, const void* qkv, const float* lse, const float* rowdot,
                            int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV, cudaStream_t stream);

}  // namespace keel::cuda
