// Causal attention forward/backward. Each (b, h) is independent, so OpenMP threads take whole
// heads and issue their own single-threaded sgemm calls (BlasSingleThreaded); within a head,
// rows are processed in blocks of kBlock so that a block of queries only meets the keys at or
// before its last row (about half the work of the full T×T product for long sequences).
#include "cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/blas.h"
#include "cpu/vecmath.h"

namespace keel::cpu {
namespace {

constexpr int64_t kBlock = 64;

int64_t head_size(int64_t C, int64_t NH, int64_t NKV) {
  if (NH <= 0 || C % NH != 0)
    throw std::invalid_argument("attention: C = " + std::to_string(C) + " is not divisible by NH = " +
                                std::to_string(NH));
  if (NKV <= 0 || NH % NKV != 0)
    throw std::invalid_argument("attention: NH = " + std::to_string(NH) + " is not a multiple of NKV = " +
                                std::to_string(NKV));
  return C / NH;
}

// In place: row[0..t] = softmax(row[0..t]); row[t+1..T) = 0.
void causal_softmax_row(float* row, int64_t t, int64_t T) {
  float max = row[0];
#pragma omp simd reduction(max : max)
  for (int64_t s = 1; s <= t; ++s) max = std::max(max, row[s]);
  const float inv = 1.0f / exp_shifted_sum(row, row, max, t + 1);
#pragma omp simd
  for (int64_t s = 0; s <= t; ++s) row[s] *= inv;
  std::fill(row + t + 1, row + T, 0.0f);
}

// In place: dp[t, s] = scale * p[t, s] * (dp[t, s] - Σ_s' p[t, s'] dp[t, s']) for s ≤ t, else 0.
// This is the softmax backward, folded with the score scaling.
void causal_softmax_backward_row(float* dp, const float* p, int64_t t, int64_t T, float scale) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t s = 0; s <= t; ++s) dot += p[s] * dp[s];
#pragma omp simd
  for (int64_t s = 0; s <= t; ++s) dp[s] = scale * p[s] * (dp[s] - dot);
  std::fill(dp + t + 1, dp + T, 0.0f);
}

}  // namespace

int64_t attention_saved_floats(int64_t B, int64_t T, int64_t C, int64_t NH) {
  (void)C;
  return B * NH * T * T;
}

void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       int64_t NKV) {
  const int64_t hs = head_size(C, NH, NKV), KC = NKV * hs, row = C + 2 * KC, group = NH / NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  BlasSingleThreaded single_threaded_blas;
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const float* q = qkv + b * T * row + h * hs;             // (T,hs), row stride `row`
      const float* k = qkv + b * T * row + C + h / group * hs;  // its key/value head
      const float* v = k + KC;
      float* p = att + (b * NH + h) * T * T;  // (T,T)
      float* o = out + b * T * C + h * hs;    // (T,hs), row stride C
      for (int64_t r0 = 0; r0 < T; r0 += kBlock) {
        const int64_t r1 = std::min(T, r0 + kBlock), rows = r1 - r0;
        sgemm(false, true, rows, r1, hs, scale, q + r0 * row, row, k, row, 0.0f, p + r0 * T, T);
        for (int64_t t = r0; t < r1; ++t) causal_softmax_row(p + t * T, t, T);
        sgemm(false, false, rows, hs, r1, 1.0f, p + r0 * T, T, v, row, 0.0f, o + r0 * C, C);
      }
    }
  }
}

// Threads take (batch, key/value head) pairs, so the query heads that share a key/value head
// add into its dk and dv one after another, never at once.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B, int64_t T,
                        int64_t C, int64_t NH, int64_t NKV) {
  const int64_t hs = head_size(C, NH, NKV), KC = NKV * hs, row = C + 2 * KC, group = NH / NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  BlasSingleThreaded single_threaded_blas;
#pragma omp parallel
  {
    std::vector<float> ds(T * T);  // per thread: dP, then dS in place
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t g = 0; g < NKV; ++g) {
        const float* k = qkv + b * T * row + C + g * hs;
        const float* v = k + KC;
        float* dk = dqkv + b * T * row + C + g * hs;
        float* dv = dk + KC;
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          const float* q = qkv + b * T * row + h * hs;
          float* dq = dqkv + b * T * row + h * hs;
          const float* p = att + (b * NH + h) * T * T;
          const float* dO = dout + b * T * C + h * hs;
          // dP = dO · vᵀ, then dS = softmax backward of dP, one row block at a time.
          for (int64_t r0 = 0; r0 < T; r0 += kBlock) {
            const int64_t r1 = std::min(T, r0 + kBlock);
            sgemm(false, true, r1 - r0, r1, hs, 1.0f, dO + r0 * C, C, v, row, 0.0f, ds.data() + r0 * T, T);
            for (int64_t t = r0; t < r1; ++t) causal_softmax_backward_row(ds.data() + t * T, p + t * T, t, T, scale);
          }
          // dv += Pᵀ · dO and dk += dSᵀ · q; key block c0..c1 is only seen by queries t ≥ c0.
          for (int64_t c0 = 0; c0 < T; c0 += kBlock) {
            const int64_t cols = std::min(T, c0 + kBlock) - c0, rows = T - c0;
            sgemm(true, false, cols, hs, rows, 1.0f, p + c0 * T + c0, T, dO + c0 * C, C, 1.0f, dv + c0 * row, row);
            sgemm(true, false, cols, hs, rows, 1.0f, ds.data() + c0 * T + c0, T, q + c0 * row, row, 1.0f,
                  dk + c0 * row, row);
          }
          // dq += dS · k, where query block r0..r1 only meets keys before r1.
          for (int64_t r0 = 0; r0 < T; r0 += kBlock) {
            const int64_t r1 = std::min(T, r0 + kBlock);
            sgemm(false, false, r1 - r0, hs, r1, 1.0f, ds.data() + r0 * T, T, k, row, 1.0f, dq + r0 * row, row);
          }
        }
      }
    }
  }
}

void attention_decode(float* out, float* k_cache, float* v_cache, const float* qkv, int64_t B, int64_t T, int64_t C,
                      int64_t NH, int64_t NKV, int64_t past, int64_t capacity) {
  const int64_t hs = head_size(C, NH, NKV), KC = NKV * hs, row = C + 2 * KC, group = NH / NKV;
  if (T <= 0 || past < 0 || past + T > capacity)
    throw std::invalid_argument("attention_decode: " + std::to_string(past) + " cached and " + std::to_string(T) +
                                " new positions do not fit a cache of " + std::to_string(capacity));
  const int64_t L = past + T;  // keys each new query may see, at most
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < NKV; ++h) {
        const float* k = qkv + (b * T + t) * row + C + h * hs;
        const int64_t at = ((b * NKV + h) * capacity + past + t) * hs;
        std::copy(k, k + hs, k_cache + at);
        std::copy(k + KC, k + KC + hs, v_cache + at);
      }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  BlasSingleThreaded single_threaded_blas;
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      std::vector<float> p(size_t(T * L));
      const float* q = qkv + b * T * row + h * hs;                    // (T,hs), row stride `row`
      const float* k = k_cache + (b * NKV + h / group) * capacity * hs;  // (L,hs)
      const float* v = v_cache + (b * NKV + h / group) * capacity * hs;
      float* o = out + b * T * C + h * hs;  // (T,hs), row stride C
      sgemm(false, true, T, L, hs, scale, q, row, k, hs, 0.0f, p.data(), L);
      for (int64_t t = 0; t < T; ++t) causal_softmax_row(p.data() + t * L, past + t, L);
      sgemm(false, false, T, hs, L, 1.0f, p.data(), L, v, hs, 0.0f, o, C);
    }
  }
}

}  // namespace keel::cpu
