// The core's loader knows the schedule kind (7): it names it, checks a schedule table's size
// and slots, and accepts libkeel-schedules.so with its four plugins.
#include <gtest/gtest.h>
#include <keel/keel.h>

#include <cstddef>
#include <filesystem>
#include <string>

#include "host/errors.h"
#include "loader/plugin_registry.h"
#include "loader/table_check.h"

namespace {

keel_status validate_stub(const keel_host*, const char*, const char*) { return KEEL_OK; }
keel_status check_stub(const keel_host*, const char*, const keel_schedule_shape*) { return KEEL_OK; }
keel_status build_stub(const keel_host*, const char*, const keel_schedule_shape*, keel_schedule_action*, size_t,
                       size_t* count) {
  *count = 0;
  return KEEL_OK;
}

keel_plugin_info info_for(const keel_schedule_api& api) {
  return keel_plugin_info{sizeof(keel_plugin_info), KEEL_KIND_SCHEDULE, "stub", "0.0.1", KEEL_ABI_VERSION_MAJOR,
                          KEEL_ABI_VERSION_MINOR, &api, "a test table"};
}

TEST(ScheduleLoader, KindIsNamedSchedule) { EXPECT_STREQ(keel::kind_name(KEEL_KIND_SCHEDULE), "schedule"); }

TEST(ScheduleLoader, AcceptsACompleteTable) {
  const keel_schedule_api api{sizeof(keel_schedule_api), validate_stub, check_stub, build_stub, 1};
  EXPECT_EQ(keel::check_kind_table(info_for(api)), "");
}

TEST(ScheduleLoader, RefusesAMissingSlotByName) {
  const keel_schedule_api api{sizeof(keel_schedule_api), validate_stub, check_stub, nullptr, 0};
  EXPECT_EQ(keel::check_kind_table(info_for(api)), "required slot(s) not implemented: build");
}

TEST(ScheduleLoader, RefusesATableShorterThanAbi07s) {
  keel_schedule_api api{sizeof(keel_schedule_api), validate_stub, check_stub, build_stub, 0};
  api.struct_size = offsetof(keel_schedule_api, splits_backward);
  EXPECT_EQ(keel::check_kind_table(info_for(api)),
            "its table is " + std::to_string(api.struct_size) + " bytes, smaller than ABI 0.7's keel_schedule_api (" +
                std::to_string(offsetof(keel_schedule_api, splits_backward) + sizeof(int32_t)) +
                " bytes, through splits_backward)");
}

TEST(ScheduleLoader, RefusesSplitsBackwardOtherThanZeroOrOne) {
  const keel_schedule_api api{sizeof(keel_schedule_api), validate_stub, check_stub, build_stub, 2};
  EXPECT_EQ(keel::check_kind_table(info_for(api)), "its splits_backward is 2, expected 0 or 1");
}

TEST(ScheduleLoader, RegistryAcceptsTheBuiltInSchedules) {
  auto& registry = keel::PluginRegistry::instance();
  ASSERT_NO_THROW(registry.register_library(KEEL_SCHEDULES_PLUGIN_PATH));
  const std::string library = std::filesystem::canonical(KEEL_SCHEDULES_PLUGIN_PATH).string();
  for (const char* name : {"gpipe", "1f1b", "interleaved", "zero-bubble"}) {
    SCOPED_TRACE(name);
    try {
      const keel::LoadedPlugin& plugin = registry.find(KEEL_KIND_SCHEDULE, name);
      EXPECT_EQ(plugin.path, library);
      EXPECT_EQ(plugin.info.kind, KEEL_KIND_SCHEDULE);
    } catch (const keel::KeelError& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

// A misspelt schedule is answered with the kind's name, the nearest schedule and the others.
TEST(ScheduleLoader, UnknownScheduleNameSuggestsTheNearest) {
  auto& registry = keel::PluginRegistry::instance();
  ASSERT_NO_THROW(registry.register_library(KEEL_SCHEDULES_PLUGIN_PATH));
  try {
    registry.find(KEEL_KIND_SCHEDULE, "1f2b");
    ADD_FAILURE() << "a schedule named 1f2b was found";
  } catch (const keel::KeelError& e) {
    EXPECT_EQ(e.code, KEEL_ERR_NOT_FOUND);
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("no schedule plugin named '1f2b' (did you mean '1f1b'?); available: gpipe, 1f1b, "
                            "interleaved, zero-bubble; searched: ",
                            0),
              0u)
        << message;
  }
}

}  // namespace
