// The fully connected layer through cuBLASLt (matmul.cpp): out = inp · weightᵀ + bias with the
// bias and GELU epilogues, and its backward. Row-major buffers, shapes as in keel/backend.h.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels.h"

namespace keel::cuda {

// What every matmul needs, owned by the backend: the handle, its workspace, the queue.
struct Matmul {
  cublasLtHandle_t handle;
  void* workspace;  // device memory, workspace_bytes long
  size_t workspace_bytes;
  cudaStream_t stream;
  bool allow_tf32;  // fp32 matmuls may use TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32)
  bool gelu_epilogue = true;  // false: a GELU after a matmul runs as gelu.cu's kernel (to measure both)
};

// out(N,OC) = inp(N,IC) · weight(OC,IC)ᵀ + bias(OC) (bias may be NULL). When gelu_pre is not
// NULL it receives that and out gets GELU of it (cuBLASLt's GELU_AUX_BIAS epilogue, or with
// gelu_epilogue false the bias epilogue and then gelu.cu). Throws std::runtime_error naming the failure.
void matmul_forward(const Matmul& mm, Elem e, void* out, void* gelu_pre, const void* inp, const void* weight,
                    const void* bias, int64_t N, int64_t IC, int64_t OC);
// dinp(N,IC) += dout·weight; dweight(OC,IC) += doutᵀ·inp (fp32); dbias(OC) += Σ_rows dout (fp32).
// Any of the three may be NULL; with dbias, bias_scratch holds column_sum_scratch_floats(N, OC).
void matmul_backward(const Matmul& mm, Elem e, void* dinp, float* dweight, float* dbias, const void* dout,
                     const void* inp, const void* weight, int64_t N, int64_t IC, int64_t OC, float* bias_scratch);

}  // namespace keel::cuda
