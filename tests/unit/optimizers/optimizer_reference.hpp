// Independent double-precision references of torch.optim.SGD and torch.optim.AdamW, written
// from PyTorch's documented algorithms (single-tensor path), for the plugins' tests. They share
// no code with the plugins. Gradients arrive unscaled; grad_scale multiplies them first, as the
// core's clipping does in place before PyTorch's optimizer.step().
#pragma once

#include <cmath>
#include <cstddef>
#include <optional>
#include <vector>

namespace keel_test {

struct SgdHyper {
  double momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

// One parameter tensor's SGD state; the momentum buffer is "None" until the first step.
struct SgdReference {
  std::vector<double> param;
  std::optional<std::vector<double>> momentum_buffer;

  void step(const SgdHyper& h, const std::vector<float>& grad, double lr, double grad_scale, bool decay) {
    std::vector<double> d_p(param.size());
    for (size_t i = 0; i < param.size(); ++i) {
      d_p[i] = grad[i] * grad_scale;
      if (decay && h.weight_decay != 0) d_p[i] += h.weight_decay * param[i];
    }
    if (h.momentum != 0) {
      if (!momentum_buffer) {
        momentum_buffer = d_p;  // torch.clone(d_p).detach()
      } else {
        for (size_t i = 0; i < param.size(); ++i)
          (*momentum_buffer)[i] = h.momentum * (*momentum_buffer)[i] + (1 - h.dampening) * d_p[i];
      }
      for (size_t i = 0; i < param.size(); ++i)
        d_p[i] = h.nesterov ? d_p[i] + h.momentum * (*momentum_buffer)[i] : (*momentum_buffer)[i];
    }
    for (size_t i = 0; i < param.size(); ++i) param[i] -= lr * d_p[i];
  }
};

struct AdamwHyper {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

struct AdamwReference {
  std::vector<double> param, exp_avg, exp_avg_sq;
  int step_count = 0;

  explicit AdamwReference(const std::vector<float>& initial)
      : param(initial.begin(), initial.end()), exp_avg(initial.size(), 0.0), exp_avg_sq(initial.size(), 0.0) {}

  void step(const AdamwHyper& h, const std::vector<float>& grad, double lr, double grad_scale, bool decay) {
    ++step_count;
    const double bias_correction1 = 1 - std::pow(h.beta1, step_count);
    const double bias_correction2 = 1 - std::pow(h.beta2, step_count);
    for (size_t i = 0; i < param.size(); ++i) {
      const double g = grad[i] * grad_scale;
      if (decay) param[i] *= 1 - lr * h.weight_decay;
      exp_avg[i] = h.beta1 * exp_avg[i] + (1 - h.beta1) * g;
      exp_avg_sq[i] = h.beta2 * exp_avg_sq[i] + (1 - h.beta2) * g * g;
      const double m_hat = exp_avg[i] / bias_correction1;
      const double v_hat = exp_avg_sq[i] / bias_correction2;
      param[i] -= lr * m_hat / (std::sqrt(v_hat) + h.eps);
    }
  }
};

}  // namespace keel_test
