// Adafactor's update of one whole tensor (transformers' Adafactor, relative_step off):
//   step size  a = lr × max(eps2, RMS(p))          (× 1 without scale_parameter)
//   beta2_t = 1 - t^decay_rate;  u = g² + eps1
//   a tensor of two or more dims, as lead × R × C (lead: the dims before the last two):
//     row = beta2_t row + (1 - beta2_t) mean_cols(u);  col = beta2_t col + (1 - beta2_t) mean_rows(u)
//     update = g / sqrt(row / mean(row)) / sqrt(col)
//   otherwise:  v = beta2_t v + (1 - beta2_t) u;  update = g / sqrt(v)
//   update /= max(1, RMS(update) / clip_threshold);  update ×= a
//   with beta1: m = beta1 m + (1 - beta1) update; update = m
//   p -= weight_decay × a × p;  p -= update
// Sums are taken in double in a fixed order, so the bits do not depend on threads.
//
// Packed state of a tensor of n elements: factored, float row[lead × R], col[lead × C]; else
// float v[n]; then, with beta1, float m[n]. The exchange form (n_state_slots arrays of n): slot 0
// holds each element's row statistic (or v), slot 1 its column statistic (0 when not
// factored), slot 2 m: packing reads row i from its first element and column j from row 0, so
// unpack then pack gives back the same bits and any layout that keeps tensors whole reshards.
#pragma once

#include <keel/params.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "adafactor_config.hpp"

namespace keel_compact {

struct FactoredShape {
  bool factored;
  int64_t lead, rows, cols, n;
  explicit FactoredShape(const keel_param_spec& spec) {
    n = 1;
    for (int32_t d = 0; d < spec.ndim; ++d) n *= spec.local_shape[d];
    factored = spec.ndim >= 2 && n > 0;
    rows = factored ? spec.local_shape[spec.ndim - 2] : n;
    cols = factored ? spec.local_shape[spec.ndim - 1] : 1;
    lead = factored ? n / (rows * cols) : 1;
  }
  int64_t second_moment_floats() const { return factored ? lead * (rows + cols) : n; }
};

inline int64_t adafactor_packed_bytes(const FactoredShape& shape, bool first_moment) {
  return (shape.second_moment_floats() + (first_moment ? shape.n : 0)) * int64_t(sizeof(float));
}

inline double root_mean_square(const float* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i]) * double(x[i]);
  return n > 0 ? std::sqrt(sum / double(n)) : 0.0;
}

inline void adafactor_update(const AdafactorConfig& c, const FactoredShape& shape, float* params, const float* grads,
                             float* packed, float lr, float grad_scale, int64_t step, bool decay) {
  const int64_t n = shape.n;
  const double step_size = double(lr) * (c.scale_parameter ? std::max(c.eps2, root_mean_square(params, n)) : 1.0);
  const double beta2t = 1.0 - std::pow(double(step), c.decay_rate);
  const float keep = float(beta2t), take = float(1.0 - beta2t), eps1 = float(c.eps1);
  std::vector<float> g(static_cast<size_t>(n)), update(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) g[size_t(i)] = grads[i] * grad_scale;
  if (shape.factored) {
    float* row = packed;
    float* col = packed + shape.lead * shape.rows;
    const int64_t R = shape.rows, C = shape.cols;
    for (int64_t l = 0; l < shape.lead; ++l) {
      const float* gl = g.data() + l * R * C;
      float* rl = row + l * R;
      float* cl = col + l * C;
      std::vector<double> col_sum(size_t(C), 0.0);
      for (int64_t i = 0; i < R; ++i) {
        double row_sum = 0.0;
        for (int64_t j = 0; j < C; ++j) {
          const float u = gl[i * C + j] * gl[i * C + j] + eps1;
          row_sum += u;
          col_sum[size_t(j)] += u;
        }
        rl[i] = keep * rl[i] + take * float(row_sum / double(C));
      }
      for (int64_t j = 0; j < C; ++j) cl[j] = keep * cl[j] + take * float(col_sum[size_t(j)] / double(R));
      double row_total = 0.0;
      for (int64_t i = 0; i < R; ++i) row_total += rl[i];
      const float row_mean = float(row_total / double(R));
      for (int64_t i = 0; i < R; ++i) {
        const float r_factor = 1.0f / std::sqrt(rl[i] / row_mean);
        for (int64_t j = 0; j < C; ++j)
          update[size_t(l * R * C + i * C + j)] = r_factor * (1.0f / std::sqrt(cl[j])) * gl[i * C + j];
      }
    }
  } else {
    float* v = packed;
    for (int64_t i = 0; i < n; ++i) {
      const float gi = g[size_t(i)];
      v[i] = keep * v[i] + take * (gi * gi + eps1);
      update[size_t(i)] = (1.0f / std::sqrt(v[i])) * gi;
    }
  }
  const float clip = float(std::max(1.0, root_mean_square(update.data(), n) / c.clip_threshold));
  const float a = float(step_size);
  for (float& u : update) u = (u / clip) * a;
  if (c.beta1) {
    float* m = packed + shape.second_moment_floats();
    const float b1 = float(*c.beta1), one_minus_b1 = float(1.0 - *c.beta1);
    for (int64_t i = 0; i < n; ++i) {
      m[i] = b1 * m[i] + one_minus_b1 * update[size_t(i)];
      update[size_t(i)] = m[i];
    }
  }
  const float shrink = float(c.weight_decay * step_size);
  for (int64_t i = 0; i < n; ++i) {
    float p = params[i];
    if (decay && c.weight_decay != 0.0) p = p - shrink * p;
    params[i] = p - update[size_t(i)];
  }
}

inline void adafactor_unpack(const FactoredShape& shape, bool first_moment, const float* packed, float* const* state) {
  if (shape.factored) {
    const float* row = packed;
    const float* col = packed + shape.lead * shape.rows;
    for (int64_t l = 0; l < shape.lead; ++l)
      for (int64_t i = 0; i < shape.rows; ++i)
        for (int64_t j = 0; j < shape.cols; ++j) {
          const int64_t e = (l * shape.rows + i) * shape.cols + j;
          state[0][e] = row[l * shape.rows + i];
          state[1][e] = col[l * shape.cols + j];
        }
  } else {
    std::memcpy(state[0], packed, size_t(shape.n) * sizeof(float));
    std::fill(state[1], state[1] + shape.n, 0.0f);
  }
  if (first_moment) std::memcpy(state[2], packed + shape.second_moment_floats(), size_t(shape.n) * sizeof(float));
}

inline void adafactor_pack(const FactoredShape& shape, bool first_moment, const float* const* state, float* packed) {
  if (shape.factored) {
    float* row = packed;
    float* col = packed + shape.lead * shape.rows;
    for (int64_t l = 0; l < shape.lead; ++l) {
      for (int64_t i = 0; i < shape.rows; ++i) row[l * shape.rows + i] = state[0][(l * shape.rows + i) * shape.cols];
      for (int64_t j = 0; j < shape.cols; ++j) col[l * shape.cols + j] = state[1][l * shape.rows * shape.cols + j];
    }
  } else {
    std::memcpy(packed, state[0], size_t(shape.n) * sizeof(float));
  }
  if (first_moment) std::memcpy(packed + shape.second_moment_floats(), state[2], size_t(shape.n) * sizeof(float));
}

}  // namespace keel_compact
