// Fused optimizer updates on fp32 master parameters, element for element the one AdamW and SGD
// rule of kernels/cpu/optimizer_update.h (which the adamw and sgd plugins and the cpu backend
// run): the same operations in the same order, the per-call scalars formed in double on the host
// from the config's doubles and rounded to fp32 once. The file is compiled with --fmad=false
// (CMakeLists.txt), as the cpu code is built with -ffp-contract=off, so no multiply-add is fused
// and each lane rounds as the host does.
#include <cmath>

#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace keel::cuda {
namespace {

__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, int64_t n, float grad_scale,
                             float one_minus_beta1, float beta2, float one_minus_beta2, float eps, float step_size,
                             float bias_correction2_sqrt, float decay_factor) {
  KEEL_GRID_STRIDE(i, n) {
    const float g = grads[i] * grad_scale;
    const float m_i = m[i] + one_minus_beta1 * (g - m[i]);
    const float v_i = beta2 * v[i] + one_minus_beta2 * g * g;
    m[i] = m_i;
    v[i] = v_i;
    const float denom = sqrtf(v_i) / bias_correction2_sqrt + eps;
    params[i] = params[i] * decay_factor - step_size * m_i / denom;
  }
}

__global__ void sgd_kernel(float* params, const float* grads, float* momentum_buffer, int64_t n, float lr,
                           float momentum, float new_grad_share, bool nesterov, float weight_decay, float grad_scale,
                           bool first_step) {
  KEEL_GRID_STRIDE(i, n) {
    float g = grads[i] * grad_scale;
    if (weight_decay != 0.0f) g += weight_decay * params[i];
    float direction = g;
    if (momentum_buffer) {
      const float buf = first_step ? g : momentum * momentum_buffer[i] + new_grad_share * g;
      momentum_buffer[i] = buf;
      direction = nesterov ? g + momentum * buf : buf;
    }
    params[i] -= lr * direction;
  }
}

}  // namespace

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, float lr, double beta1,
                  double beta2, double eps, double weight_decay, float grad_scale, int64_t step, cudaStream_t stream) {
  if (n <= 0) return;
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(beta1, t);
  const double bias_correction2 = 1.0 - std::pow(beta2, t);
  const float step_size = static_cast<float>(static_cast<double>(lr) / bias_correction1);
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float decay_factor = static_cast<float>(1.0 - static_cast<double>(lr) * weight_decay);
  adamw_kernel<<<grid_for(n), kThreads, 0, stream>>>(
      params, grads, m, v, n, grad_scale, static_cast<float>(1.0 - beta1), static_cast<float>(beta2),
      static_cast<float>(1.0 - beta2), static_cast<float>(eps), step_size, bias_correction2_sqrt, decay_factor);
}

void sgd_update(float* params, const float* grads, float* momentum_buffer, int64_t n, float lr, double momentum,
                double dampening, bool nesterov, double weight_decay, float grad_scale, int64_t step,
                cudaStream_t stream) {
  if (n <= 0) return;
  sgd_kernel<<<grid_for(n), kThreads, 0, stream>>>(params, grads, momentum > 0.0 ? momentum_buffer : nullptr, n, lr,
                                                   static_cast<float>(momentum), static_cast<float>(1.0 - dampening),
                                                   nesterov, static_cast<float>(weight_decay), grad_scale, step == 1);
}

}  // namespace keel::cuda
