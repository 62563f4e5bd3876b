// The router's forward and backward, one token's row at a time (rows are independent, so they
// split over the OpenMP threads without changing a bit).
#include "cpu/moe_route.h"

#include <cmath>
#include <vector>

#include "cpu/parallel_threshold.h"  // defines: kParallelMinElements

namespace keel::cpu {
namespace {

// Softmax of one row into p, returning the row's log Σ exp.
float softmax_row(float* p, const float* logits, int32_t E) {
  float max = logits[0];
  for (int32_t e = 1; e < E; ++e) max = std::fmax(max, logits[e]);
  float sum = 0.0f;
  for (int32_t e = 0; e < E; ++e) {
    p[e] = std::exp(logits[e] - max);
    sum += p[e];
  }
  for (int32_t e = 0; e < E; ++e) p[e] /= sum;
  return max + std::log(sum);
}

// The K largest of key (E), largest first; a strict > keeps the lower index on a tie.
void top_k(int32_t* chosen, const float* scores, const float* bias, int32_t E, int32_t K) {
  for (int32_t j = 0; j < K; ++j) {
    int32_t best = -1;
    float best_key = 0.0f;
    for (int32_t e = 0; e < E; ++e) {
      bool taken = false;
      for (int32_t i = 0; i < j && !taken; ++i) taken = chosen[i] == e;
      if (taken) continue;
      const float key = bias ? scores[e] + bias[e] : scores[e];
      if (best < 0 || key > best_key) best = e, best_key = key;
    }
    chosen[j] = best;
  }
}

}  // namespace

void moe_route(float* weights, int32_t* experts, float* scores, const float* logits, const float* selection_bias,
               const MoeRouteShape& shape) {
  const int32_t E = shape.E, K = shape.K;
#pragma omp parallel for if (shape.N * E > kParallelMinElements)
  for (int64_t n = 0; n < shape.N; ++n) {
    const float* l = logits + n * E;
    float* s = scores + n * E;
    if (shape.sigmoid) {
      for (int32_t e = 0; e < E; ++e) s[e] = 1.0f / (1.0f + std::exp(-l[e]));
    } else {
      softmax_row(s, l, E);
    }
    int32_t* chosen = experts + n * K;
    float* w = weights + n * K;
    top_k(chosen, s, selection_bias, E, K);
    float sum = 0.0f;
    for (int32_t j = 0; j < K; ++j) sum += w[j] = s[chosen[j]];
    if (shape.normalize && sum > 0.0f)  // chosen scores that are all 0 (underflowed) stay 0, not 0/0
      for (int32_t j = 0; j < K; ++j) w[j] /= sum;
  }
}

void moe_route_backward(float* dlogits, const float* dweights, const float* logits, const float* scores,
                        const int32_t* experts, const float* expert_dscores, float z_grad, const MoeRouteShape& shape) {
  const int32_t E = shape.E, K = shape.K;
#pragma omp parallel if (shape.N * E > kParallelMinElements)
  {
    std::vector<float> dscores(E), softmax(E);
#pragma omp for
    for (int64_t n = 0; n < shape.N; ++n) {
      const float* s = scores + n * E;
      const int32_t* chosen = experts + n * K;
      const float* dw = dweights + n * K;
      for (int32_t e = 0; e < E; ++e) dscores[e] = expert_dscores ? expert_dscores[e] : 0.0f;
      if (shape.normalize) {
        // w_j = s_j / S with S = Σ s_j: ∂loss/∂s_i = (dw_i − Σ_j dw_j · w_j) / S. Where S is 0 the
        // forward left the weights 0 (constant), so dweights add nothing.
        float S = 0.0f, dw_dot_w = 0.0f;
        for (int32_t j = 0; j < K; ++j) S += s[chosen[j]];
        if (S > 0.0f) {
          for (int32_t j = 0; j < K; ++j) dw_dot_w += dw[j] * (s[chosen[j]] / S);
          for (int32_t j = 0; j < K; ++j) dscores[chosen[j]] += (dw[j] - dw_dot_w) / S;
        }
      } else {
        for (int32_t j = 0; j < K; ++j) dscores[chosen[j]] += dw[j];
      }
      float* dl = dlogits + n * E;
      if (shape.sigmoid) {
        for (int32_t e = 0; e < E; ++e) dl[e] = dscores[e] * s[e] * (1.0f - s[e]);
      } else {
        float ds_dot_s = 0.0f;
        for (int32_t e = 0; e < E; ++e) ds_dot_s += dscores[e] * s[e];
        for (int32_t e = 0; e < E; ++e) dl[e] = s[e] * (dscores[e] - ds_dot_s);
      }
      if (z_grad != 0.0f) {
        const float lse = softmax_row(softmax.data(), logits + n * E, E);
        for (int32_t e = 0; e < E; ++e) dl[e] += z_grad * 2.0f * lse * softmax[e];
      }
    }
  }
}

}  // namespace keel::cpu
