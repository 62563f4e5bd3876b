// What the cuda backend's files share: its settings, the device objects one backend owns
// (CudaBackend), and how every slot runs (run: the ABI guard, the device, the op profile) and
// checks its arguments. backend_cuda.cpp holds the table and most slots; each op family too big to
// sit beside them has its own file (backend_cuda_moe.cpp).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <keel/backend.h>
#include <keel_support/common/abi_guard.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

#include "caching_allocator.hpp"           // defines: CachingAllocator
#include "cuda/attention_cudnn_shape.hpp"  // defines: AttentionShape
#ifdef KEEL_HAVE_CUDNN_ATTENTION
#include "cuda/attention_cudnn.h"  // defines: CudnnAttention
#endif
#include "cuda/kernels.h"  // defines: Elem
#include "cuda/matmul.h"   // defines: Matmul
#include "op_profile.hpp"  // defines: OpProfile

namespace keel_cuda {

using keel::cuda::Elem;
using keel_support::StatusError;
constexpr const char* kSource = "backend cuda";
constexpr size_t kMatmulWorkspaceBytes = size_t{32} << 20;  // cuBLASLt's recommendation for Hopper

struct Settings {
  int device = 0;
  bool device_given = false;  // false: the launcher's local rank picks the device (chosen_device)
  Elem compute = Elem::f32;
  bool allow_tf32 = false;
  double peak_tflops = 0.0;  // 0: estimated from the device's properties
  bool op_profile = false;   // time every slot with CUDA events, log the table at destroy
  // Which attention runs: "auto" is cuDNN's fused flash attention where it takes the shape (bf16,
  // head sizes in multiples of 8 up to 256) and Keel's kernels elsewhere; "cudnn" fails where
  // cuDNN does not take a shape (so a check cannot pass without it); "kernels" never uses cuDNN.
  std::string attention = "auto";
  bool gelu_epilogue = true;  // a matmul's GELU in cuBLASLt's epilogue; false: its own kernel after
  // false: cuDNN's attention backward may add with atomics (faster; runs no longer reproduce)
  bool deterministic_attention = true;
};

inline void require(bool ok, const std::string& what) {
  if (!ok) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, what);
}
inline void require_sizes(std::initializer_list<int64_t> sizes, const char* op) {
  for (int64_t s : sizes) require(s >= 0, std::string(op) + ": negative size " + std::to_string(s));
}
inline void check_cuda(cudaError_t status, const std::string& what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear it, so the next call does not report it again (sticky errors stay)
  throw StatusError(status == cudaErrorMemoryAllocation ? KEEL_ERR_OUT_OF_MEMORY : KEEL_ERR_INTERNAL,
                    what + ": " + cudaGetErrorString(status));
}
// After a kernel launch: a bad launch configuration shows up here; faults inside the kernel show
// up at the next synchronising call (copy, synchronize, sum_squares).
inline void launched(const char* op) { check_cuda(cudaGetLastError(), std::string(op) + ": kernel launch"); }

struct CudaBackend {
  const keel_host* host = nullptr;
  int device = 0;
  Settings settings;
  double peak_flops_per_s = 0.0;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t cublaslt = nullptr;
  void* matmul_workspace = nullptr;
  void* reduce_scratch = nullptr;  // kSumSquaresBlocks doubles of partial sums, then one double
  keel_cuda::CachingAllocator allocator;
  std::mutex host_mutex;
  std::unordered_set<void*> host_blocks;  // alloc_host's live blocks, freed at destroy
  std::unique_ptr<keel_cuda::OpProfile> profile;  // null unless "op_profile": true
#ifdef KEEL_HAVE_CUDNN_ATTENTION
  std::unique_ptr<keel::cuda::CudnnAttention> cudnn;  // null: attention runs Keel's kernels only
#endif
  std::string cudnn_absent;  // why cudnn is null, for errors under "attention": "cudnn"
  std::unordered_set<keel::cuda::AttentionShape, keel::cuda::AttentionShapeHash> logged_shapes;

  keel::cuda::Matmul matmul() const {
    return keel::cuda::Matmul{cublaslt, matmul_workspace, kMatmulWorkspaceBytes, stream, settings.allow_tf32,
                              settings.gelu_epilogue};
  }
  double* reduce_partial() const { return static_cast<double*>(reduce_scratch); }
  double* reduce_result() const { return reduce_partial() + keel::cuda::kSumSquaresBlocks; }

  ~CudaBackend() {
    if (stream) cudaStreamSynchronize(stream);
    profile.reset();
#ifdef KEEL_HAVE_CUDNN_ATTENTION
    cudnn.reset();
#endif
    allocator.release_all();
    if (matmul_workspace) cudaFree(matmul_workspace);
    if (reduce_scratch) cudaFree(reduce_scratch);
    for (void* ptr : host_blocks) cudaFreeHost(ptr);
    if (cublaslt) cublasLtDestroy(cublaslt);
    if (stream) cudaStreamDestroy(stream);
  }
};

// Scratch from the caching allocator, handed back when the scope ends: the stream orders its next
// user after the work queued here.
struct StreamScratch {
  CudaBackend& b;
  void* ptr = nullptr;
  StreamScratch(CudaBackend& backend, size_t bytes) : b(backend) {
    if (bytes) ptr = b.allocator.allocate(bytes, b.stream);
  }
  ~StreamScratch() {
    if (ptr) b.allocator.release(ptr);
  }
};

// Runs `body` for the backend object under the ABI guard, on the backend's device (a thread may
// have another device current).
// With "op_profile", the work it enqueues is timed under the name of the slot that called it.
inline thread_local double counted_flops = 0.0;  // what the running slot counts (count_flops), for the profile
inline void count_flops(double flops) { counted_flops += flops; }

template <typename Body>
keel_status run(void* backend, Body&& body, const char* op = __builtin_FUNCTION()) {
  auto* b = static_cast<CudaBackend*>(backend);
  return keel_support::guard(b ? b->host : nullptr, kSource, [&] {
    require(b != nullptr, "backend handle is NULL");
    check_cuda(cudaSetDevice(b->device), "cudaSetDevice(" + std::to_string(b->device) + ")");
    if (!b->profile) return body(*b);
    counted_flops = 0.0;
    const keel_cuda::OpProfile::Timing timing = b->profile->begin(op);
    try {
      body(*b);
    } catch (...) {
      b->profile->cancel(timing);
      throw;
    }
    b->profile->end(timing, counted_flops);
  });
}

inline Elem elem_of(keel_dtype dt, const char* op) {
  if (dt.code == KEEL_DTYPE_FLOAT && dt.bits == 32 && dt.lanes == 1) return Elem::f32;
  if (dt.code == KEEL_DTYPE_BFLOAT && dt.bits == 16 && dt.lanes == 1) return Elem::bf16;
  const std::string found = "dtype code " + std::to_string(dt.code) + " with " + std::to_string(dt.bits) +
                            " bits and " + std::to_string(dt.lanes) + " lanes";
  throw StatusError(KEEL_ERR_UNIMPLEMENTED,
                    std::string(op) + ": the cuda backend computes in fp32 or bf16, not " + found);
}
inline keel_dtype dtype_of(Elem e) {
  return e == Elem::bf16 ? keel_dtype{KEEL_DTYPE_BFLOAT, 16, 1} : keel_dtype{KEEL_DTYPE_FLOAT, 32, 1};
}

inline size_t element_bytes(Elem e) { return e == Elem::bf16 ? 2 : 4; }

// The mixture-of-experts slots (backend_cuda_moe.cpp), filled into the table by make_api.
void fill_moe_slots(keel_backend_api& api);
// Attention over blocks and rope at positions (backend_cuda_block_attention.cpp, 0.19).
void fill_block_attention_slots(keel_backend_api& api);
// NF4 dequantization and fake quantization (backend_cuda_quant.cpp, 0.19).
void fill_quant_slots(keel_backend_api& api);
// LoRA's adapter dropout (backend_cuda_dropout.cpp, 0.19).
void fill_dropout_slots(keel_backend_api& api);

}  // namespace keel_cuda
