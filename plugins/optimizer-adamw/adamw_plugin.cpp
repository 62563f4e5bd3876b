// The adamw plugin's entry: what AdamW answers to describe and which update it runs; the
// table itself, with its guards and argument checks, is keel_support::OptimizerSlots.
#include <keel/optimizer.h>
#include <keel/params.h>
#include <keel/plugin.h>
#include <keel_support/optimizer/optimizer_slots.hpp>
#include <keel_support/common/plugin_entry.hpp>

#include "adamw_config.hpp"
#include "adamw_update.hpp"

namespace keel_adamw {
namespace {

class AdamwOptimizer {
 public:
  static constexpr const char* kSource = "optimizer adamw";
  explicit AdamwOptimizer(const AdamwConfig& config) : config_(config) {}
  int32_t n_state_slots() const { return 2; }  // first moment m, second moment v
  float base_lr() const { return static_cast<float>(config_.lr); }
  uint32_t decay_flags() const {
    return config_.decay_all_params ? 0u : static_cast<uint32_t>(KEEL_PARAM_NO_WEIGHT_DECAY);
  }
  void update_host(const keel_optimizer_step_args& args) const { adamw_update_host(config_, args); }
  // The same rule as the backend's fused op (backend.h adamw_update), in its queue.
  void update_on_backend(const keel_optimizer_step_args& args) const {
    if (!KEEL_HAS_SLOT(args.backend, adamw_update))
      throw keel_support::StatusError(KEEL_ERR_UNIMPLEMENTED, "step: the backend has no adamw_update (ABI 0.8), which "
                                                              "AdamW needs on memory host code cannot read");
    keel_support::check_callee(
        args.backend->adamw_update(args.backend_obj, args.params, args.grads, args.state[0], args.state[1], args.n,
                                   args.lr, config_.beta1, config_.beta2, config_.eps,
                                   args.apply_weight_decay ? config_.weight_decay : 0.0, args.grad_scale, args.step),
        "backend adamw_update");
  }

 private:
  AdamwConfig config_;
};

constexpr keel_optimizer_api kApi = keel_support::OptimizerSlots<AdamwOptimizer, parse_adamw_config>::table();

const keel_plugin_info kInfos[] = {keel_support::plugin_info(
    KEEL_KIND_OPTIMIZER, "adamw", "0.1.0", &kApi,
    "AdamW with decoupled weight decay and bias correction (torch.optim.AdamW rule)")};

const keel_plugin_list kList = keel_support::plugin_list(kInfos);

}  // namespace
}  // namespace keel_adamw

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &keel_adamw::kList; }
