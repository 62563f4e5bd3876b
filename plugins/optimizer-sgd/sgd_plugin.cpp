// The sgd plugin's entry: what SGD answers to describe and which update it runs; the table
// itself, with its guards and argument checks, is keel_support::OptimizerSlots.
#include <keel/optimizer.h>
#include <keel/params.h>
#include <keel/plugin.h>
#include <keel_support/optimizer/optimizer_slots.hpp>
#include <keel_support/common/plugin_entry.hpp>

#include "sgd_config.hpp"
#include "sgd_update.hpp"

namespace keel_sgd {
namespace {

class SgdOptimizer {
 public:
  static constexpr const char* kSource = "optimizer sgd";
  explicit SgdOptimizer(const SgdConfig& config) : config_(config) {}
  int32_t n_state_slots() const { return config_.momentum > 0.0 ? 1 : 0; }  // the momentum buffer
  float base_lr() const { return static_cast<float>(config_.lr); }
  // Biases, norm gains and position embeddings take no L2 decay, as in GPT-2 recipes.
  uint32_t decay_flags() const { return KEEL_PARAM_NO_WEIGHT_DECAY; }
  void update_host(const keel_optimizer_step_args& args) const { sgd_update_host(config_, args); }
  // The same rule as the backend's fused op (backend.h sgd_update), in its queue.
  void update_on_backend(const keel_optimizer_step_args& args) const {
    if (!KEEL_HAS_SLOT(args.backend, sgd_update))
      throw keel_support::StatusError(KEEL_ERR_UNIMPLEMENTED, "step: the backend has no sgd_update (ABI 0.8), which "
                                                              "SGD needs on memory host code cannot read");
    keel_support::check_callee(
        args.backend->sgd_update(args.backend_obj, args.params, args.grads,
                                 config_.momentum > 0.0 ? args.state[0] : nullptr, args.n, args.lr, config_.momentum,
                                 config_.dampening, config_.nesterov ? 1 : 0,
                                 args.apply_weight_decay ? config_.weight_decay : 0.0, args.grad_scale, args.step),
        "backend sgd_update");
  }

 private:
  SgdConfig config_;
};

constexpr keel_optimizer_api kApi = keel_support::OptimizerSlots<SgdOptimizer, parse_sgd_config>::table();

const keel_plugin_info kInfos[] = {keel_support::plugin_info(
    KEEL_KIND_OPTIMIZER, "sgd", "0.1.0", &kApi,
    "SGD with momentum, dampening, Nesterov and coupled L2 weight decay (torch.optim.SGD rule)")};

const keel_plugin_list kList = keel_support::plugin_list(kInfos);

}  // namespace
}  // namespace keel_sgd

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &keel_sgd::kList; }
