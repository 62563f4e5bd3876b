// The cpu backend's fused optimizer updates (ABI 0.8 adamw_update, sgd_update): the rules of the
// adamw and sgd plugins, from the one header both use, so either path gives the same bits.
// Compiled with -ffp-contract=off (CMakeLists.txt), as that header requires.
#include <string>

#include <keel_support/backend/backend_slots.hpp>  // defines: KEEL_FILL_BACKEND_SLOTS

#include "backend_cpu.hpp"           // defines: run, require*
#include "cpu/optimizer_update.h"    // defines: keel::cpu::adamw_update, keel::cpu::sgd_update

namespace keel_backend_cpu {
namespace {

void require_update(int64_t n, int64_t step, bool arrays_present, const char* op) {
  require_sizes({n}, op);
  require(step >= 1, std::string(op) + ": step is 1-based, found " + std::to_string(step));
  require(n == 0 || arrays_present, std::string(op) + ": NULL array");
}

keel_status adamw_update(void* backend, float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                         double beta1, double beta2, double eps, double weight_decay, float grad_scale, int64_t step) {
  return run(backend, [&] {
    require_update(n, step, params && grads && m && v, "adamw_update");
    count_work(0.0, 28.0 * n);  // params, grads, m, v read; params, m, v written
    keel::cpu::adamw_update(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, step);
  });
}

keel_status sgd_update(void* backend, float* params, const float* grads, float* momentum_buffer, int64_t n, float lr,
                       double momentum, double dampening, int32_t nesterov, double weight_decay, float grad_scale,
                       int64_t step) {
  return run(backend, [&] {
    require_update(n, step, params && grads && (momentum <= 0.0 || momentum_buffer), "sgd_update");
    count_work(0.0, (momentum > 0.0 ? 20.0 : 12.0) * n);
    keel::cpu::sgd_update(params, grads, momentum_buffer, n, lr, momentum, dampening, nesterov != 0, weight_decay,
                          grad_scale, step);
  });
}

}  // namespace

void fill_optimizer_slots(keel_backend_api& api) { KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_OPTIMIZER_SLOTS_0_8); }

}  // namespace keel_backend_cpu
