// The core's loader knows the offload kind (8): it names it, checks an offload table's size and
// slots, and accepts libkeel-offload.so with its two plugins.
#include <gtest/gtest.h>
#include <keel/keel.h>

#include <filesystem>
#include <string>

#include "host/errors.h"
#include "loader/plugin_registry.h"
#include "loader/table_check.h"

namespace {

keel_plugin_info info_for(const keel_offload_api& api) {
  return keel_plugin_info{sizeof(keel_plugin_info), KEEL_KIND_OFFLOAD, "stub", "0.0.1", KEEL_ABI_VERSION_MAJOR,
                          KEEL_ABI_VERSION_MINOR, &api, "a test table"};
}

TEST(OffloadLoader, KindIsNamedOffload) { EXPECT_STREQ(keel::kind_name(KEEL_KIND_OFFLOAD), "offload"); }

TEST(OffloadLoader, RefusesMissingSlotsByName) {
  keel_offload_api api{};
  api.struct_size = sizeof api;
  EXPECT_EQ(keel::check_kind_table(info_for(api)),
            "required slot(s) not implemented: validate_config, create, destroy, describe, add_extent, submit_write, "
            "submit_read, wait, wait_all, counters, alloc_buffer, free_buffer");
}

TEST(OffloadLoader, RefusesATableTooShort) {
  keel_offload_api api{};
  api.struct_size = offsetof(keel_offload_api, free_buffer);
  EXPECT_EQ(keel::check_kind_table(info_for(api)),
            "its table is " + std::to_string(api.struct_size) + " bytes, too short to hold the 12 required slots (" +
                std::to_string(sizeof(keel_offload_api)) + " bytes)");
}

TEST(OffloadLoader, RegistryAcceptsTheBuiltInTiers) {
  auto& registry = keel::PluginRegistry::instance();
  ASSERT_NO_THROW(registry.register_library(KEEL_OFFLOAD_PLUGIN_PATH));
  const std::string library = std::filesystem::canonical(KEEL_OFFLOAD_PLUGIN_PATH).string();
  for (const char* name : {"nvme", "cpu"}) {
    SCOPED_TRACE(name);
    try {
      const keel::LoadedPlugin& plugin = registry.find(KEEL_KIND_OFFLOAD, name);
      EXPECT_EQ(plugin.path, library);
    } catch (const keel::KeelError& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

}  // namespace
