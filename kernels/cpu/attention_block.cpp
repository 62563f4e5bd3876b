// Attention over blocks, flash-style on the cpu: per (batch, head) and block of kQueryBlock query rows,
// the scores against the keys the block sees at all (the union of its rows' ranges) come from one
// sgemm; each row is masked to its own range, and its softmax is kept as a log-sum-exp. The
// backward recomputes the scores from it, one row block at a time, so memory stays at two blocks
// of scores per thread whatever the sequence length.
#include "cpu/attention_block.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/blas.h"
#include "cpu/vecmath.h"

namespace keel::cpu {
namespace {

constexpr int64_t kQueryBlock = 64;
constexpr float kNoKey = -std::numeric_limits<float>::infinity();

void require_shape(const AttentionBlock& a) {
  if (a.B < 0 || a.Tq < 0 || a.Tkv < 0 || a.hs <= 0 || a.NKV <= 0 || a.NH <= 0 || a.NH % a.NKV != 0)
    throw std::invalid_argument("attention_block: need hs > 0 and NH a positive multiple of NKV, found NH " +
                                std::to_string(a.NH) + ", NKV " + std::to_string(a.NKV) + ", hs " +
                                std::to_string(a.hs));
  if (a.q_stride < a.NH * a.hs || a.kv_stride < 2 * a.NKV * a.hs)
    throw std::invalid_argument("attention_block: row strides q " + std::to_string(a.q_stride) + ", kv " +
                                std::to_string(a.kv_stride) + " are narrower than the heads they hold");
}

// The keys a block's rows see: row t of the block sees keys lo[t] .. hi[t] of the kv block (none
// when lo > hi); first .. last spans every row's range.
struct BlockRange {
  std::vector<int64_t> lo, hi;
  int64_t first = 0, last = -1;
  bool empty() const { return last < first; }
  int64_t width() const { return last - first + 1; }
};

BlockRange visible_keys(const AttentionBlock& a, int64_t b, int64_t r0, int64_t r1) {
  BlockRange r;
  r.lo.resize(size_t(r1 - r0));
  r.hi.resize(size_t(r1 - r0));
  r.first = a.Tkv;
  for (int64_t t = r0; t < r1; ++t) {
    const int64_t index = a.q_index0 + t;
    const int64_t position = a.positions ? int64_t(a.positions[b * a.Tq + t]) : index;
    const int64_t lo = position < 0 ? a.Tkv : std::max<int64_t>(index - position - a.kv_index0, 0);
    const int64_t hi = std::min(index - a.kv_index0, a.Tkv - 1);
    r.lo[size_t(t - r0)] = lo;
    r.hi[size_t(t - r0)] = hi;
    if (lo <= hi) {
      r.first = std::min(r.first, lo);
      r.last = std::max(r.last, hi);
    }
  }
  return r;
}

// Scores of the block's rows against keys first .. last: S(rows, width) = scale · q · kᵀ.
void block_scores(const AttentionBlock& a, int64_t b, int64_t h, int64_t r0, int64_t rows, const BlockRange& r,
                  float scale, float* scores) {
  const int64_t g = h / (a.NH / a.NKV);
  const float* q = a.q + (b * a.Tq + r0) * a.q_stride + h * a.hs;
  const float* k = a.kv + (b * a.Tkv + r.first) * a.kv_stride + g * a.hs;
  sgemm(false, true, rows, r.width(), a.hs, scale, q, a.q_stride, k, a.kv_stride, 0.0f, scores, r.width());
}

}  // namespace

void attention_block_forward(const AttentionBlock& a, float* out, int64_t out_stride, float* lse) {
  require_shape(a);
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.hs));
  const int64_t group = a.NH / a.NKV;
  BlasSingleThreaded single_threaded_blas;
#pragma omp parallel
  {
    std::vector<float> scores(size_t(kQueryBlock * std::max<int64_t>(a.Tkv, 1)));
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int64_t b = 0; b < a.B; ++b) {
      for (int64_t h = 0; h < a.NH; ++h) {
        float* row_lse = lse + (b * a.NH + h) * a.Tq;
        float* o = out + b * a.Tq * out_stride + h * a.hs;
        const float* v = a.kv + b * a.Tkv * a.kv_stride + (a.NKV + h / group) * a.hs;
        for (int64_t r0 = 0; r0 < a.Tq; r0 += kQueryBlock) {
          const int64_t r1 = std::min(a.Tq, r0 + kQueryBlock), rows = r1 - r0;
          const BlockRange r = visible_keys(a, b, r0, r1);
          if (r.empty()) {
            for (int64_t t = r0; t < r1; ++t) {
              std::fill(o + t * out_stride, o + t * out_stride + a.hs, 0.0f);
              row_lse[t] = kNoKey;
            }
            continue;
          }
          const int64_t width = r.width();
          block_scores(a, b, h, r0, rows, r, scale, scores.data());
          for (int64_t t = 0; t < rows; ++t) {
            float* p = scores.data() + t * width;
            const int64_t lo = r.lo[size_t(t)] - r.first, hi = r.hi[size_t(t)] - r.first;
            if (lo > hi) {
              std::fill(p, p + width, 0.0f);
              row_lse[r0 + t] = kNoKey;
              continue;
            }
            float max = p[lo];
            for (int64_t s = lo + 1; s <= hi; ++s) max = std::max(max, p[s]);
            const float sum = exp_shifted_sum(p + lo, p + lo, max, hi - lo + 1);
            const float inv = 1.0f / sum;
            for (int64_t s = lo; s <= hi; ++s) p[s] *= inv;
            std::fill(p, p + lo, 0.0f);
            std::fill(p + hi + 1, p + width, 0.0f);
            row_lse[r0 + t] = max + std::log(sum);
          }
          sgemm(false, false, rows, a.hs, width, 1.0f, scores.data(), width, v + r.first * a.kv_stride, a.kv_stride,
                0.0f, o + r0 * out_stride, out_stride);
        }
      }
    }
  }
}

// Threads take (batch, key/value head) pairs: the query heads sharing a key/value head add into
// its dk and dv one after another, and each writes only its own dq.
void attention_block_backward(const AttentionBlock& a, const float* out, const float* dout, int64_t out_stride,
                              const float* lse, float* dq, float* dkv) {
  require_shape(a);
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.hs));
  const int64_t group = a.NH / a.NKV;
  BlasSingleThreaded single_threaded_blas;
#pragma omp parallel
  {
    const size_t block_floats = size_t(kQueryBlock * std::max<int64_t>(a.Tkv, 1));
    std::vector<float> probs(block_floats), dscores(block_floats);
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int64_t b = 0; b < a.B; ++b) {
      for (int64_t g = 0; g < a.NKV; ++g) {
        const float* k = a.kv + b * a.Tkv * a.kv_stride + g * a.hs;
        const float* v = k + a.NKV * a.hs;
        float* dk = dkv + b * a.Tkv * a.kv_stride + g * a.hs;
        float* dv = dk + a.NKV * a.hs;
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          const float* row_lse = lse + (b * a.NH + h) * a.Tq;
          const float* q = a.q + b * a.Tq * a.q_stride + h * a.hs;
          float* dq_head = dq + b * a.Tq * a.q_stride + h * a.hs;
          const float* o = out + b * a.Tq * out_stride + h * a.hs;
          const float* dO = dout + b * a.Tq * out_stride + h * a.hs;
          for (int64_t r0 = 0; r0 < a.Tq; r0 += kQueryBlock) {
            const int64_t r1 = std::min(a.Tq, r0 + kQueryBlock), rows = r1 - r0;
            const BlockRange r = visible_keys(a, b, r0, r1);
            if (r.empty()) continue;
            const int64_t width = r.width();
            block_scores(a, b, h, r0, rows, r, scale, probs.data());
            // dP = dO · vᵀ over the same keys.
            sgemm(false, true, rows, width, a.hs, 1.0f, dO + r0 * out_stride, out_stride, v + r.first * a.kv_stride,
                  a.kv_stride, 0.0f, dscores.data(), width);
            for (int64_t t = 0; t < rows; ++t) {
              float* p = probs.data() + t * width;
              float* ds = dscores.data() + t * width;
              const int64_t lo = r.lo[size_t(t)] - r.first, hi = r.hi[size_t(t)] - r.first;
              const float row_stat = row_lse[r0 + t];
              if (lo > hi || row_stat == kNoKey) {
                std::fill(p, p + width, 0.0f);
                std::fill(ds, ds + width, 0.0f);
                continue;
              }
              float D = 0.0f;  // rowsum(dout ∘ out): the softmax backward's Σ p·dP
              for (int64_t d = 0; d < a.hs; ++d) D += dO[(r0 + t) * out_stride + d] * o[(r0 + t) * out_stride + d];
              exp_shifted_sum(p + lo, p + lo, row_stat, hi - lo + 1);
              std::fill(p, p + lo, 0.0f);
              std::fill(p + hi + 1, p + width, 0.0f);
              for (int64_t s = 0; s < width; ++s) ds[s] = scale * p[s] * (ds[s] - D);
            }
            float* dk_block = dk + r.first * a.kv_stride;
            float* dv_block = dv + r.first * a.kv_stride;
            sgemm(true, false, width, a.hs, rows, 1.0f, probs.data(), width, dO + r0 * out_stride, out_stride, 1.0f,
                  dv_block, a.kv_stride);
            sgemm(true, false, width, a.hs, rows, 1.0f, dscores.data(), width, q + r0 * a.q_stride, a.q_stride, 1.0f,
                  dk_block, a.kv_stride);
            sgemm(false, false, rows, a.hs, width, 1.0f, dscores.data(), width, k + r.first * a.kv_stride,
                  a.kv_stride, 1.0f, dq_head + r0 * a.q_stride, a.q_stride);
          }
        }
      }
    }
  }
}

void attention_merge(float* out, int64_t out_stride, float* lse, const float* out_b, int64_t out_b_stride,
                     const float* lse_b, int64_t B, int64_t T, int64_t NH, int64_t hs) {
#pragma omp parallel for collapse(2) if (B * T * NH * hs > (1 << 16))
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        float& l = lse[(b * NH + h) * T + t];
        const float lb = lse_b[(b * NH + h) * T + t];
        if (lb == kNoKey) continue;  // the other block adds nothing
        float* o = out + (b * T + t) * out_stride + h * hs;
        const float* ob = out_b + (b * T + t) * out_b_stride + h * hs;
        const float high = std::max(l, lb);
        const float merged = high + std::log(std::exp(l - high) + std::exp(lb - high));
        const float keep = l == kNoKey ? 0.0f : std::exp(l - merged), take = std::exp(lb - merged);
        for (int64_t d = 0; d < hs; ++d) o[d] = o[d] * keep + ob[d] * take;
        l = merged;
      }
}

}  // namespace keel::cpu
