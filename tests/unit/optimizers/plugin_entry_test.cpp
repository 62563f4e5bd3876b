// The optimizer libraries' entry: one plugin each, the right kind, name, versions, and a table
// whose every slot is filled — what the core's loader checks before using a plugin.
#include <gtest/gtest.h>
#include <keel/optimizer.h>

#include <string>

#include "plugin_test_support.hpp"

namespace keel_test {
namespace {

void expect_complete_optimizer_entry(const char* library, const char* name) {
  LoadedPlugin plugin(library, KEEL_KIND_OPTIMIZER, name);
  EXPECT_EQ(plugin.list().struct_size, sizeof(keel_plugin_list));
  EXPECT_EQ(plugin.list().count, 1u);
  EXPECT_EQ(plugin.list().abi_major, static_cast<uint32_t>(KEEL_ABI_VERSION_MAJOR));
  const keel_plugin_info& info = plugin.info();
  EXPECT_EQ(info.struct_size, sizeof(keel_plugin_info));
  EXPECT_EQ(info.abi_major, static_cast<uint32_t>(KEEL_ABI_VERSION_MAJOR));
  EXPECT_EQ(info.abi_minor, static_cast<uint32_t>(KEEL_ABI_VERSION_MINOR));
  EXPECT_STREQ(info.version, "0.1.0");
  ASSERT_NE(info.description, nullptr);
  EXPECT_GT(std::string(info.description).size(), 10u);
  const auto* api = static_cast<const keel_optimizer_api*>(info.api);
  ASSERT_NE(api, nullptr);
  EXPECT_EQ(api->struct_size, sizeof(keel_optimizer_api));
  EXPECT_TRUE(KEEL_HAS_SLOT(api, validate_config));
  EXPECT_TRUE(KEEL_HAS_SLOT(api, create));
  EXPECT_TRUE(KEEL_HAS_SLOT(api, destroy));
  EXPECT_TRUE(KEEL_HAS_SLOT(api, describe));
  EXPECT_TRUE(KEEL_HAS_SLOT(api, step));
}

TEST(OptimizerEntry, SgdIsCompleteAndVersioned) { expect_complete_optimizer_entry(KEEL_SGD_PLUGIN_PATH, "sgd"); }

TEST(OptimizerEntry, AdamwIsCompleteAndVersioned) { expect_complete_optimizer_entry(KEEL_ADAMW_PLUGIN_PATH, "adamw"); }

}  // namespace
}  // namespace keel_test
