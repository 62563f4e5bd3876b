// cuDNN's fused flash attention for the cuda backend: causal, grouped-query, bf16, head sizes up to
// 256, forward and backward. This header names nothing of cuDNN: the frontend's headers are heavy,
// so only attention_cudnn.cpp includes them. libcudnn is opened at run time (dlopen), so the
// plugin still loads, and falls back to its own kernels, where cuDNN is missing or too old.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

#include "cuda/attention_cudnn_shape.hpp"  // defines: AttentionShape

namespace keel::cuda {

// What this machine's cuDNN is, without a GPU: "cuDNN 9.19.0 (libcudnn.so.9)", or why none can be
// used. Cheap after the first call (the library stays open).
struct CudnnLibrary {
  bool usable = false;
  std::string text;
};
const CudnnLibrary& cudnn_library();

// One handle and a cache of built graphs: one forward and one backward graph per shape, built on
// the shape's first sight (building takes tens of milliseconds) and kept. Not thread-safe: the
// backend calls it from its one stream's thread.
class CudnnAttention {
 public:
  // Null, with *why_not, when cuDNN cannot be used on this machine. `deterministic` builds the
  // backward without atomics (the same bits every run, which bit-exact resumes need); false lets
  // cuDNN accumulate dQ with atomics, faster and not reproducible. A shape whose graphs need more
  // workspace than `max_workspace_bytes` is refused (the deterministic backward's grows as
  // B·NH·T²·2 bytes on Hopper).
  static std::unique_ptr<CudnnAttention> open(bool deterministic, size_t max_workspace_bytes, std::string* why_not);
  ~CudnnAttention();

  // Whether this shape runs through cuDNN: builds both graphs the first time, and remembers a
  // refusal (with *why) as well as a success. Both directions are decided together; a caller may
  // still mix paths within a layer, since the statistics agree with Keel's kernels' (the
  // natural-log log-sum-exp of the scaled scores, (B, NH, T) fp32).
  bool prepare(const AttentionShape& s, std::string* why);
  // Workspace the forward or the backward graph needs (after a successful prepare).
  size_t workspace_bytes(const AttentionShape& s, bool backward) const;

  // out(B,T,C) and stats(B,NH,T) fp32 from qkv(B,T,W), bf16, read in place with strides.
  void forward(const AttentionShape& s, void* out, float* stats, const void* qkv, void* workspace,
               cudaStream_t stream);
  // dqkv(B,T,W) = the gradient (written, not added).
  void backward(const AttentionShape& s, void* dqkv, const void* dout, const void* qkv, const void* out,
                const float* stats, void* workspace, cudaStream_t stream);

 private:
  struct Impl;
  explicit CudnnAttention(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace keel::cuda
