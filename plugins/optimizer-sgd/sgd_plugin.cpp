// The sgd plugin's C ABI face: what SGD answers to describe and which update it runs; the table
// itself, with its guards and argument checks, is keel_support::OptimizerSlots.
#include <keel/optimizer.h>
#include <keel/params.h>
#include <keel/plugin.h>
#include <keel_support/optimizer_slots.hpp>
#include <keel_support/plugin_entry.hpp>

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
