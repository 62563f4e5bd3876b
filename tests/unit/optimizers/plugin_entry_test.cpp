// The optimizer libraries' entry: one plugin each, the right kind, name, versions, and a table
// whose every slot is filled — what the core's loader checks before using a plugin.
#include <gtest/gtest.h>
#include <keel/optimizer.h>

#include <cstring>
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

// describe writes only the prefix the caller sized: a too-short struct is refused untouched
// past its end; a longer one keeps its extra bytes and learns the plugin's size.
void expect_describe_honours_struct_size(const char* library, const char* name) {
  LoadedPlugin plugin(library, KEEL_KIND_OPTIMIZER, name);
  const auto& api = plugin.api<keel_optimizer_api>();
  const keel_host host = make_test_host();
  void* optimizer = nullptr;
  ASSERT_EQ(api.create(&host, "{\"lr\": 0.01}", "optimizer", &optimizer), KEEL_OK) << last_error();
  struct Padded {
    keel_optimizer_info info;
    unsigned char canary[16];
  } box;
  std::memset(&box, 0xAB, sizeof box);
  box.info.struct_size = sizeof(size_t) + 4;  // struct_size and n_state_slots
  EXPECT_EQ(api.describe(optimizer, &box.info), KEEL_ERR_INVALID_ARGUMENT);
  const unsigned char* after = reinterpret_cast<const unsigned char*>(&box) + box.info.struct_size;
  for (size_t i = 0; i < sizeof box - box.info.struct_size; ++i) ASSERT_EQ(after[i], 0xAB) << name << ": byte written";
  std::memset(&box, 0xCD, sizeof box);
  box.info.struct_size = sizeof box;
  ASSERT_EQ(api.describe(optimizer, &box.info), KEEL_OK) << last_error();
  EXPECT_EQ(box.info.struct_size, sizeof(keel_optimizer_info));
  EXPECT_EQ(box.info.base_lr, 0.01f);
  for (unsigned char c : box.canary) ASSERT_EQ(c, 0xCD);
  api.destroy(optimizer);
}

TEST(OptimizerEntry, SgdDescribeHonoursStructSize) { expect_describe_honours_struct_size(KEEL_SGD_PLUGIN_PATH, "sgd"); }
TEST(OptimizerEntry, AdamwDescribeHonoursStructSize) {
  expect_describe_honours_struct_size(KEEL_ADAMW_PLUGIN_PATH, "adamw");
}

TEST(OptimizerEntry, SgdIsCompleteAndVersioned) { expect_complete_optimizer_entry(KEEL_SGD_PLUGIN_PATH, "sgd"); }

TEST(OptimizerEntry, AdamwIsCompleteAndVersioned) { expect_complete_optimizer_entry(KEEL_ADAMW_PLUGIN_PATH, "adamw"); }

}  // namespace
}  // namespace keel_test
