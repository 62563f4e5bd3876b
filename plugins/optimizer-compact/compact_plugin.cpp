// The memory-efficient optimizers' entries: adamw8bit and adafactor keep packed state
// (optimizer.h 0.12); the table, with its guards and argument checks, is
// keel_support::OptimizerSlots, the rules are blockwise_adamw.hpp and adafactor_update.hpp.
#include <keel/optimizer.h>
#include <keel/params.h>
#include <keel/plugin.h>
#include <keel_support/optimizer/optimizer_slots.hpp>
#include <keel_support/common/plugin_entry.hpp>

#include "adafactor_config.hpp"
#include "adafactor_update.hpp"
#include "adamw_config.hpp"
#include "blockwise_adamw.hpp"

namespace keel_compact {
namespace {

uint32_t no_decay_flags(bool decay_all) { return decay_all ? 0u : static_cast<uint32_t>(KEEL_PARAM_NO_WEIGHT_DECAY); }

class Adamw8bit {
 public:
  static constexpr const char* kSource = "optimizer adamw8bit";
  static constexpr uint32_t kFlags = KEEL_OPTIMIZER_PACKED_STATE;
  explicit Adamw8bit(const keel_adamw::AdamwConfig& config) : config_(config) {}
  int32_t n_state_slots() const { return 2; }  // exchanged as adamw's: m and v, decoded
  float base_lr() const { return static_cast<float>(config_.lr); }
  uint32_t decay_flags() const { return no_decay_flags(config_.decay_all_params); }
  int64_t packed_bytes(const keel_optimizer_range& range) const { return BlockwiseLayout(range.n).bytes(); }
  void pack(const keel_optimizer_range& range, const float* const* state, unsigned char* packed) const {
    blockwise_pack(state[0], state[1], range.n, packed);
  }
  void unpack(const keel_optimizer_range& range, const unsigned char* packed, float* const* state) const {
    blockwise_unpack(packed, range.n, state[0], state[1]);
  }
  void update_host(const keel_optimizer_step_args& args) const {
    const AdamwHyper hyper{args.lr, config_.beta1, config_.beta2, config_.eps,
                           args.apply_weight_decay ? config_.weight_decay : 0.0, args.grad_scale, args.step};
    blockwise_adamw_update(args.params, args.grads, static_cast<unsigned char*>(args.packed_state), args.n, hyper);
  }

 private:
  keel_adamw::AdamwConfig config_;
};

class Adafactor {
 public:
  static constexpr const char* kSource = "optimizer adafactor";
  static constexpr uint32_t kFlags = KEEL_OPTIMIZER_PACKED_STATE | KEEL_OPTIMIZER_WHOLE_TENSORS;
  explicit Adafactor(const AdafactorConfig& config) : config_(config) {}
  // Row statistic, column statistic (the factored second moment, per element), and m with beta1.
  int32_t n_state_slots() const { return config_.beta1 ? 3 : 2; }
  float base_lr() const { return static_cast<float>(config_.lr); }
  uint32_t decay_flags() const { return no_decay_flags(config_.decay_all_params); }
  int64_t packed_bytes(const keel_optimizer_range& range) const {
    return adafactor_packed_bytes(FactoredShape(*range.spec), config_.beta1.has_value());
  }
  void pack(const keel_optimizer_range& range, const float* const* state, unsigned char* packed) const {
    adafactor_pack(FactoredShape(*range.spec), config_.beta1.has_value(), state, reinterpret_cast<float*>(packed));
  }
  void unpack(const keel_optimizer_range& range, const unsigned char* packed, float* const* state) const {
    adafactor_unpack(FactoredShape(*range.spec), config_.beta1.has_value(), reinterpret_cast<const float*>(packed), state);
  }
  void update_host(const keel_optimizer_step_args& args) const {
    adafactor_update(config_, FactoredShape(*args.range.spec), args.params, args.grads,
                     static_cast<float*>(args.packed_state), args.lr, args.grad_scale, args.step,
                     args.apply_weight_decay != 0);
  }

 private:
  AdafactorConfig config_;
};

constexpr keel_optimizer_api kAdamw8bitApi =
    keel_support::OptimizerSlots<Adamw8bit, keel_adamw::parse_adamw_config>::table();
constexpr keel_optimizer_api kAdafactorApi = keel_support::OptimizerSlots<Adafactor, parse_adafactor_config>::table();

const keel_plugin_info kInfos[] = {
    keel_support::plugin_info(KEEL_KIND_OPTIMIZER, "adamw8bit", "0.1.0", &kAdamw8bitApi,
                              "AdamW with both moments in 8 bits (dynamic map, blocks of 2048): 2 bytes of state per "
                              "parameter against adamw's 8"),
    keel_support::plugin_info(KEEL_KIND_OPTIMIZER, "adafactor", "0.1.0", &kAdafactorApi,
                              "Adafactor (factored second moment, relative step off, update RMS clipping); whole "
                              "tensors: ddp, diloco or edit at tp 1")};

const keel_plugin_list kList = keel_support::plugin_list(kInfos);

}  // namespace
}  // namespace keel_compact

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &keel_compact::kList; }
