// Vocabulary-sharded embedding and cross-entropy kernels. Same threading as embedding.cpp and
// crossentropy.cpp: the dwte scatter is split by channel slices (no two threads touch one float,
// and the summation order does not depend on the thread count); the cross-entropy is parallel
// over rows.
#include "cpu/vocab_shard.h"

#include "cpu/parallel_threshold.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "cpu/vecmath.h"

namespace keel::cpu {

void embedding_rows_forward(float* out, const int32_t* tokens, const float* wte_rows, const float* wpe, int64_t B,
                            int64_t T, int64_t C, int64_t row_begin, int64_t rows) {
#pragma omp parallel for collapse(2) if (B * T * C > keel::cpu::kParallelMinElements)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      float* o = out + (b * T + t) * C;
      const int64_t row = static_cast<int64_t>(tokens[b * T + t]) - row_begin;
      const bool mine = row >= 0 && row < rows;
      const float* wt = wte_rows + (mine ? row : 0) * C;
      const float* wp = wpe ? wpe + t * C : nullptr;
      if (mine && wp) {
#pragma omp simd
        for (int64_t i = 0; i < C; ++i) o[i] = wt[i] + wp[i];
      } else if (mine) {
        std::copy(wt, wt + C, o);
      } else if (wp) {
        std::copy(wp, wp + C, o);
      } else {
        std::fill(o, o + C, 0.0f);
      }
    }
  }
}

void embedding_rows_backward(float* dwte_rows, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                             int64_t T, int64_t C, int64_t row_begin, int64_t rows) {
  const bool parallel = B * T * C > keel::cpu::kParallelMinElements;
  if (dwpe) {
#pragma omp parallel for if (parallel)
    for (int64_t t = 0; t < T; ++t) {
      float* d = dwpe + t * C;
      for (int64_t b = 0; b < B; ++b) {
        const float* g = dout + (b * T + t) * C;
#pragma omp simd
        for (int64_t i = 0; i < C; ++i) d[i] += g[i];
      }
    }
  }
  if (dwte_rows) {
    const int64_t slices = std::max<int64_t>(1, std::min<int64_t>(parallel ? omp_get_max_threads() : 1, C / 16));
#pragma omp parallel for num_threads(static_cast<int>(slices)) if (parallel)
    for (int64_t slice = 0; slice < slices; ++slice) {
      const int64_t i0 = C * slice / slices, i1 = C * (slice + 1) / slices;
      for (int64_t bt = 0; bt < B * T; ++bt) {
        const int64_t row = static_cast<int64_t>(tokens[bt]) - row_begin;
        if (row < 0 || row >= rows) continue;
        float* d = dwte_rows + row * C;
        const float* g = dout + bt * C;
#pragma omp simd
        for (int64_t i = i0; i < i1; ++i) d[i] += g[i];
      }
    }
  }
}

void crossentropy_shard_stats(float* stats, const float* logits, const int32_t* targets, int64_t N,
                              int64_t col_begin, int64_t valid_cols, int64_t cols) {
#pragma omp parallel for if (N * valid_cols > keel::cpu::kParallelMinElements)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits + n * cols;
    float max = -INFINITY;
#pragma omp simd reduction(max : max)
    for (int64_t i = 0; i < valid_cols; ++i) max = std::max(max, x[i]);
    const float sum = exp_shifted_total(x, max, valid_cols);
    const int64_t target = static_cast<int64_t>(targets[n]) - col_begin;
    stats[n * 3 + 0] = max;
    stats[n * 3 + 1] = sum;
    stats[n * 3 + 2] = targets[n] >= 0 && target >= 0 && target < valid_cols ? x[target] : 0.0f;
  }
}

void crossentropy_shard_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                                 float dloss, int64_t N, int64_t col_begin, int64_t valid_cols, int64_t cols) {
#pragma omp parallel for if (N * valid_cols > keel::cpu::kParallelMinElements)
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] < 0) continue;
    float* d = dlogits + n * cols;
    const float* x = logits + n * cols;
    const float shift = lse[n];
    exp_shifted_scaled(d, x, shift, dloss, valid_cols, /*from_zero=*/false);
    const int64_t target = static_cast<int64_t>(targets[n]) - col_begin;
    if (target >= 0 && target < valid_cols) d[target] -= dloss;
  }
}

void crossentropy_shard_backward_in_place(float* logits, const float* lse, const int32_t* targets, float dloss,
                                          int64_t N, int64_t col_begin, int64_t valid_cols, int64_t cols) {
#pragma omp parallel for if (N * valid_cols > keel::cpu::kParallelMinElements)
  for (int64_t n = 0; n < N; ++n) {
    float* x = logits + n * cols;
    if (targets[n] < 0) {
      std::fill(x, x + cols, 0.0f);
      continue;
    }
    const float shift = lse[n];
    // From 0: the bits the += path gives from a zeroed buffer (a -0 product becomes +0).
    exp_shifted_scaled(x, x, shift, dloss, valid_cols, /*from_zero=*/true);
    std::fill(x + valid_cols, x + cols, 0.0f);
    const int64_t target = static_cast<int64_t>(targets[n]) - col_begin;
    if (target >= 0 && target < valid_cols) x[target] -= dloss;
  }
}

void crossentropy_combine(float* lse, float* loss_sum, const float* stats, int64_t n_shards,
                          const int32_t* targets, int64_t N, float weight) {
  double loss = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    double max = -INFINITY, target_logit = 0.0;
    for (int64_t r = 0; r < n_shards; ++r) max = std::max(max, static_cast<double>(stats[(r * N + n) * 3]));
    double sum = 0.0;
    for (int64_t r = 0; r < n_shards; ++r) {
      const float* s = stats + (r * N + n) * 3;
      if (s[0] != -INFINITY) sum += s[1] * std::exp(s[0] - max);  // a shard with no valid column adds nothing
      target_logit += s[2];
    }
    const double row_lse = max == -INFINITY ? -INFINITY : max + std::log(sum);
    lse[n] = static_cast<float>(row_lse);
    if (targets[n] >= 0) loss += row_lse - target_logit;
  }
  *loss_sum = static_cast<float>(*loss_sum + static_cast<double>(weight) * loss);
}

}  // namespace keel::cpu
