// The loader's rule for a backend's fp32-only compute ops (ABI 0.1: matmul_forward ...
// sum_squares): a backend declaring 0.8 or newer may leave them NULL, since its *_dt ops compute
// at any type; one declaring an older minor has nothing to stand in for them and is refused,
// naming the missing slots and the rule.
#include <gtest/gtest.h>
#include <keel/keel.h>

#include <string>

#include "host/errors.h"
#include "loader/plugin_registry.h"
#include "loader/table_check.h"

namespace {

void never_called() {}
// Any non-NULL pointer of the slot's type: the loader only looks at which slots are set.
#define FILL(api, slot) (api).slot = reinterpret_cast<decltype((api).slot)>(&never_called)

// The slots every backend needs, and the *_dt ops of 0.8 that stand in for the fp32 ones.
keel_backend_api without_fp32_ops() {
  keel_backend_api api{};
  api.struct_size = sizeof api;
  FILL(api, validate_config); FILL(api, create); FILL(api, destroy); FILL(api, device); FILL(api, peak_flops);
  FILL(api, alloc); FILL(api, free_memory); FILL(api, copy); FILL(api, fill_zero); FILL(api, synchronize);
  FILL(api, compute_dtype); FILL(api, matmul_forward_dt); FILL(api, matmul_backward_dt);
  FILL(api, layernorm_forward_dt); FILL(api, layernorm_backward_dt); FILL(api, attention_saved_bytes);
  FILL(api, attention_forward_dt); FILL(api, attention_backward_dt); FILL(api, gelu_forward_dt);
  FILL(api, gelu_backward_dt); FILL(api, add_dt); FILL(api, accumulate_dt); FILL(api, scale_dt);
  FILL(api, embedding_forward_dt); FILL(api, embedding_backward_dt); FILL(api, crossentropy_stats_dt);
  FILL(api, crossentropy_combine); FILL(api, crossentropy_backward_dt); FILL(api, sum_squares_dt);
  return api;
}

keel_plugin_info backend_info(const char* name, uint32_t minor, const keel_backend_api* api) {
  return keel_plugin_info{sizeof(keel_plugin_info), KEEL_KIND_BACKEND, name, "0.0.1", KEEL_ABI_VERSION_MAJOR,
                          minor, api, "a backend with *_dt ops only"};
}

const char kFp32Ops[] =
    "matmul_forward, matmul_backward, layernorm_forward, layernorm_backward, attention_saved_floats, "
    "attention_forward, attention_backward, gelu_forward, gelu_backward, add, accumulate, scale, embedding_forward, "
    "embedding_backward, crossentropy_forward, crossentropy_backward, sum_squares";

TEST(BackendFp32Slots, OptionalFromMinor8) {
  static const keel_backend_api api = without_fp32_ops();
  for (uint32_t minor : {8u, 12u, uint32_t(KEEL_ABI_VERSION_MINOR)})
    EXPECT_EQ(keel::check_kind_table(backend_info("dt_only", minor, &api)), "") << "ABI 0." << minor;
  auto& registry = keel::PluginRegistry::instance();
  ASSERT_NO_THROW(registry.register_in_process(backend_info("dt_only_0_8", 8, &api)));
  EXPECT_EQ(registry.find(KEEL_KIND_BACKEND, "dt_only_0_8").info.abi_minor, 8u);
}

TEST(BackendFp32Slots, RequiredBeforeMinor8) {
  static const keel_backend_api api = without_fp32_ops();
  EXPECT_EQ(keel::check_kind_table(backend_info("dt_only", 7, &api)),
            std::string("required slot(s) not implemented: ") + kFp32Ops +
                " (a backend built against ABI 0.7 must fill its fp32 ops; from 0.8 the *_dt ops may stand in for "
                "them)");
  auto& registry = keel::PluginRegistry::instance();
  try {
    registry.register_in_process(backend_info("dt_only_0_7", 7, &api));
    FAIL() << "a 0.7 backend without its fp32 ops was accepted";
  } catch (const std::exception& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("in-process plugin 'dt_only_0_7' was refused: required slot(s) not implemented: "
                           "matmul_forward,"), std::string::npos) << message;
    EXPECT_NE(message.find("built against ABI 0.7 must fill its fp32 ops"), std::string::npos) << message;
  }
}

TEST(BackendFp32Slots, BaseSlotsStayRequired) {
  keel_backend_api api = without_fp32_ops();
  api.synchronize = nullptr;
  EXPECT_EQ(keel::check_kind_table(backend_info("no_sync", 8, &api)), "required slot(s) not implemented: synchronize");
}

}  // namespace
