// bf16 sums in fp32. comm.h asks that bf16 be moved as is and summed in fp32, rounded once;
// NCCL's own bf16 sum rounds at every step of its ring, so a bf16 all_reduce or reduce_scatter
// with SUM widens its input to fp32 on the stream, reduces that, and narrows the result. (MAX
// is exact in bf16 and stays NCCL's.) Both launches are queued on `stream` and return at once.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace keel_nccl {

// out(n) fp32 = in(n) bf16, exactly.
cudaError_t widen_bf16(float* out, const void* in, size_t n, cudaStream_t stream);
// out(n) bf16 = in(n) fp32 rounded to nearest even.
cudaError_t narrow_to_bf16(void* out, const float* in, size_t n, cudaStream_t stream);

}  // namespace keel_nccl
