// Which attention shapes the cuda backend hands to cuDNN's fused flash attention, and the key its
// graph cache files them under. Plain C++ (no CUDA, no cuDNN), so the choice is tested on
// machines without either: tests/unit/cuda/attention_cudnn_shape_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace keel::cuda {

// cuDNN 9's flash attention takes head sizes in multiples of 8 up to 256 (on sm_80 and sm_90).
constexpr int64_t kCudnnMaxHeadSize = 256;

// One causal self-attention over qkv(B,T,W), W = NH·hs + 2·NKV·hs: the query heads, then the key
// and the value heads, side by side in each row (the backend ABI's packed layout).
struct AttentionShape {
  int64_t B = 0, T = 0, NH = 0, NKV = 0, hs = 0;

  int64_t C() const { return NH * hs; }
  int64_t row_width() const { return (NH + 2 * NKV) * hs; }
  bool operator==(const AttentionShape& o) const {
    return B == o.B && T == o.T && NH == o.NH && NKV == o.NKV && hs == o.hs;
  }
};

struct AttentionShapeHash {
  size_t operator()(const AttentionShape& s) const {
    size_t h = 0;
    for (int64_t v : {s.B, s.T, s.NH, s.NKV, s.hs}) h = h * 1000003u ^ std::hash<int64_t>()(v);
    return h;
  }
};

// Empty when cuDNN's flash attention may take this shape in this precision; otherwise why not, in
// words for the log ("fp32: cuDNN's flash attention is bf16 or fp16 only"). cuDNN may still refuse
// a shape this allows when it builds the graph; the backend then falls back as well.
inline std::string cudnn_attention_refusal(bool bf16, const AttentionShape& s) {
  if (!bf16) return "fp32: cuDNN's fused attention computes in bf16 or fp16 only";
  if (s.B < 1 || s.T < 1 || s.NH < 1 || s.NKV < 1 || s.hs < 1) return "an empty shape";
  if (s.NH % s.NKV != 0)
    return "NH = " + std::to_string(s.NH) + " is not a multiple of NKV = " + std::to_string(s.NKV);
  if (s.hs % 8 != 0) return "head size " + std::to_string(s.hs) + " is not a multiple of 8";
  if (s.hs > kCudnnMaxHeadSize)
    return "head size " + std::to_string(s.hs) + " is above cuDNN's " + std::to_string(kCudnnMaxHeadSize);
  // cuDNN indexes with 32-bit strides in places; stay well inside them.
  if (s.T * s.row_width() >= (int64_t{1} << 31) || s.B * s.NH * s.T >= (int64_t{1} << 31))
    return "a batch's rows are beyond 2^31 elements";
  return {};
}

}  // namespace keel::cuda
