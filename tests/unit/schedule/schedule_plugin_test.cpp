// libkeel-schedules.so through its C ABI tables, loaded with dlopen as the core loads it: the
// tables' lists equal build_schedule's over the whole sweep, check_shape refuses exactly what
// build_schedule refuses (same numbers, KEEL_ERR_INVALID_CONFIG), a too-small buffer gets the
// full count and nothing past its capacity, and the config section refuses unknown keys.
#include <gtest/gtest.h>
#include <keel/schedule.h>
#include <keel_support/common/abi_guard.hpp>

#include <string>
#include <vector>

#include "plugin_test_support.hpp"
#include "schedule_test_support.hpp"
#include "schedules.hpp"

namespace keel_schedule_test {
namespace {

using keel_test::last_error;
using keel_test::LoadedPlugin;

const char* const kConfig = R"({"plugin": "x"})";

keel_schedule_shape make_shape(int p, int m, int s, int v) {
  return keel_schedule_shape{sizeof(keel_schedule_shape), p, m, s, v};
}

class SchedulePlugin {
 public:
  explicit SchedulePlugin(const std::string& name)
      : name_(name), plugin_(KEEL_SCHEDULES_PLUGIN_PATH, KEEL_KIND_SCHEDULE, name.c_str()) {}
  const keel_schedule_api& api() const { return plugin_.api<keel_schedule_api>(); }
  const keel_host* host() const { return &host_; }

  // The whole list through the two-call protocol: ask for the count, then fill.
  keel_status build(const keel_schedule_shape& shape, std::vector<keel_schedule_action>& out) const {
    size_t count = 0;
    keel_status status = api().build(&host_, kConfig, &shape, nullptr, 0, &count);
    if (status != KEEL_OK) return status;
    out.assign(count, keel_schedule_action{});
    size_t again = 0;
    status = api().build(&host_, kConfig, &shape, out.data(), out.size(), &again);
    EXPECT_EQ(again, count);
    return status;
  }

 private:
  std::string name_;
  LoadedPlugin plugin_;
  keel_host host_ = keel_test::make_test_host();
};

keel_schedule_action expected_abi(const Action& action) {
  static const int32_t kinds[] = {KEEL_ACTION_FORWARD,         KEEL_ACTION_BACKWARD,        KEEL_ACTION_BACKWARD_INPUT,
                                  KEEL_ACTION_BACKWARD_WEIGHT, KEEL_ACTION_SEND_ACTIVATION, KEEL_ACTION_RECV_ACTIVATION,
                                  KEEL_ACTION_SEND_GRADIENT,   KEEL_ACTION_RECV_GRADIENT};
  return keel_schedule_action{kinds[static_cast<int>(action.kind)], action.microbatch, action.chunk, action.peer_stage,
                              action.last_for_chunk ? uint32_t(KEEL_ACTION_LAST_FOR_CHUNK) : 0u};
}

std::string text(const keel_schedule_action& a) {
  return "{kind " + std::to_string(a.kind) + ", mb " + std::to_string(a.microbatch) + ", chunk " +
         std::to_string(a.chunk) + ", peer " + std::to_string(a.peer_stage) + ", flags " + std::to_string(a.flags) + "}";
}

bool same(const keel_schedule_action& a, const keel_schedule_action& b) {
  return a.kind == b.kind && a.microbatch == b.microbatch && a.chunk == b.chunk && a.peer_stage == b.peer_stage &&
         a.flags == b.flags;
}

// build_schedule's refusal reason without its "pipeline schedule \"name\": " prefix, or "".
std::string library_refusal(const std::string& name, int p, int m, int s, int v, std::vector<Action>& list) {
  try {
    list = keel_schedule::build_schedule(name, p, m, s, v);
    return "";
  } catch (const keel_support::StatusError& e) {
    const std::string prefix = "pipeline schedule \"" + name + "\": ";
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(prefix, 0), 0u) << what;
    return what.substr(prefix.size());
  }
}

TEST(SchedulePlugin, EntryListsTheFourSchedules) {
  LoadedPlugin plugin(KEEL_SCHEDULES_PLUGIN_PATH, KEEL_KIND_SCHEDULE, "gpipe");
  const keel_plugin_list& list = plugin.list();
  ASSERT_EQ(list.count, 4u);
  const char* names[] = {"gpipe", "1f1b", "interleaved", "zero-bubble"};
  for (size_t i = 0; i < list.count; ++i) {
    const keel_plugin_info& info = list.plugins[i];
    EXPECT_EQ(info.kind, KEEL_KIND_SCHEDULE);
    EXPECT_STREQ(info.name, names[i]);
    EXPECT_EQ(info.abi_major, uint32_t(KEEL_ABI_VERSION_MAJOR));
    EXPECT_EQ(info.abi_minor, uint32_t(KEEL_ABI_VERSION_MINOR));
    const auto* api = static_cast<const keel_schedule_api*>(info.api);
    EXPECT_EQ(api->struct_size, sizeof(keel_schedule_api));
    EXPECT_EQ(api->splits_backward, std::string(names[i]) == "zero-bubble" ? 1 : 0) << names[i];
  }
}

// Every (schedule, p, m, v, stage) of the sweep, plus stages just outside the pipeline.
TEST(SchedulePlugin, TablesAgreeWithBuildScheduleOverTheSweep) {
  int accepted = 0, refused = 0;
  for (const auto& name : keel_schedule::schedule_names()) {
    SchedulePlugin plugin(name);
    bool any_split = false;
    for (int p : {1, 2, 4})
      for (int m = 1; m <= 8; ++m)
        for (int v : {1, 2})
          for (int s = -1; s <= p; ++s) {
            SCOPED_TRACE(name + " p=" + std::to_string(p) + " m=" + std::to_string(m) + " s=" + std::to_string(s) +
                         " v=" + std::to_string(v));
            std::vector<Action> library_list;
            const std::string reason = library_refusal(name, p, m, s, v, library_list);
            const keel_schedule_shape shape = make_shape(p, m, s, v);
            last_error().clear();
            const keel_status checked = plugin.api().check_shape(plugin.host(), kConfig, &shape);
            std::vector<keel_schedule_action> table_list;
            if (!reason.empty()) {
              ++refused;
              EXPECT_EQ(checked, KEEL_ERR_INVALID_CONFIG);
              EXPECT_EQ(last_error(), "schedule " + name + ": " + reason);
              last_error().clear();
              EXPECT_EQ(plugin.build(shape, table_list), KEEL_ERR_INVALID_CONFIG);
              EXPECT_EQ(last_error(), "schedule " + name + ": " + reason);
              continue;
            }
            ++accepted;
            EXPECT_EQ(checked, KEEL_OK) << last_error();
            ASSERT_EQ(plugin.build(shape, table_list), KEEL_OK) << last_error();
            ASSERT_EQ(table_list.size(), library_list.size());
            for (size_t i = 0; i < library_list.size(); ++i) {
              const keel_schedule_action expected = expected_abi(library_list[i]);
              EXPECT_TRUE(same(table_list[i], expected))
                  << "action " << i << ": table " << text(table_list[i]) << ", build_schedule " << text(expected);
              any_split |= table_list[i].kind == KEEL_ACTION_BACKWARD_INPUT ||
                           table_list[i].kind == KEEL_ACTION_BACKWARD_WEIGHT;
            }
          }
    EXPECT_EQ(any_split, plugin.api().splits_backward == 1) << name << ": splits_backward disagrees with its lists";
  }
  // Both branches ran: valid shapes for all four, refusals (stage -1 and p at least) for all.
  EXPECT_GT(accepted, 4 * 8);
  EXPECT_GT(refused, 4 * 3 * 8 * 2 * 2 - 1);
}

TEST(SchedulePlugin, InterleavedRefusalNamesTheNumbers) {
  SchedulePlugin plugin("interleaved");
  const keel_schedule_shape shape = make_shape(4, 6, 0, 2);
  EXPECT_EQ(plugin.api().check_shape(plugin.host(), kConfig, &shape), KEEL_ERR_INVALID_CONFIG);
  EXPECT_EQ(last_error(),
            "schedule interleaved: micro-batches 6 must be a multiple of pp 4 (micro-batches run in groups of pp, "
            "as in Megatron)");
}

TEST(SchedulePlugin, VirtualStagesRefusedOutsideInterleaved) {
  SchedulePlugin plugin("1f1b");
  const keel_schedule_shape shape = make_shape(2, 4, 0, 2);
  EXPECT_EQ(plugin.api().check_shape(plugin.host(), kConfig, &shape), KEEL_ERR_INVALID_CONFIG);
  EXPECT_EQ(last_error(),
            "schedule 1f1b: virtual_stages is 2, expected 1 (only \"interleaved\" runs several chunks per stage)");
}

TEST(SchedulePlugin, SmallBufferGetsTheFullCountAndNothingPastItsCapacity) {
  SchedulePlugin plugin("1f1b");
  const keel_schedule_shape shape = make_shape(4, 8, 1, 1);
  const std::vector<Action> full = keel_schedule::build_schedule("1f1b", 4, 8, 1, 1);
  ASSERT_GT(full.size(), 10u);
  for (size_t capacity : {size_t(0), size_t(1), size_t(7), full.size() - 1, full.size(), full.size() + 3}) {
    SCOPED_TRACE("capacity " + std::to_string(capacity));
    const keel_schedule_action sentinel{-7, -7, -7, -7, 0xdeadbeefu};
    std::vector<keel_schedule_action> buffer(full.size() + 8, sentinel);
    size_t count = 12345;
    ASSERT_EQ(plugin.api().build(plugin.host(), kConfig, &shape, buffer.data(), capacity, &count), KEEL_OK)
        << last_error();
    EXPECT_EQ(count, full.size());
    const size_t written = std::min(capacity, full.size());
    for (size_t i = 0; i < written; ++i) EXPECT_TRUE(same(buffer[i], expected_abi(full[i]))) << "action " << i;
    for (size_t i = written; i < buffer.size(); ++i) EXPECT_TRUE(same(buffer[i], sentinel)) << "written past: " << i;
  }
  size_t count = 0;
  EXPECT_EQ(plugin.api().build(plugin.host(), kConfig, &shape, nullptr, 0, &count), KEEL_OK) << last_error();
  EXPECT_EQ(count, full.size());
}

TEST(SchedulePlugin, BuildRefusesNullBuffersAndShortShapes) {
  SchedulePlugin plugin("gpipe");
  keel_schedule_shape shape = make_shape(2, 2, 0, 1);
  size_t count = 0;
  EXPECT_EQ(plugin.api().build(plugin.host(), kConfig, &shape, nullptr, 4, &count), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "schedule gpipe: out is NULL but capacity is 4 (expected 0 with no buffer)");
  EXPECT_EQ(plugin.api().build(plugin.host(), kConfig, &shape, nullptr, 0, nullptr), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "schedule gpipe: out_count is NULL");
  EXPECT_EQ(plugin.api().check_shape(plugin.host(), kConfig, nullptr), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "schedule gpipe: shape is NULL");
  shape.struct_size = sizeof(size_t) + 2 * sizeof(int32_t);
  EXPECT_EQ(plugin.api().check_shape(plugin.host(), kConfig, &shape), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "schedule gpipe: shape->struct_size is " + std::to_string(shape.struct_size) +
                              ", below the " + std::to_string(sizeof(keel_schedule_shape)) +
                              " bytes of ABI 0.7's keel_schedule_shape");
}

TEST(SchedulePlugin, ConfigSectionRefusesUnknownKeysByPath) {
  for (const auto& name : keel_schedule::schedule_names()) {
    SCOPED_TRACE(name);
    SchedulePlugin plugin(name);
    EXPECT_EQ(plugin.api().validate_config(plugin.host(), R"({"plugin": "1f1b"})", "parallel.schedule"), KEEL_OK)
        << last_error();
    EXPECT_EQ(plugin.api().validate_config(plugin.host(), R"({"plugin": "1f1b", "chunks": 2})", "parallel.schedule"),
              KEEL_ERR_INVALID_CONFIG);
    EXPECT_EQ(last_error(), "schedule " + name + ": parallel.schedule.chunks: unknown key; known keys: plugin");
    EXPECT_EQ(plugin.api().validate_config(plugin.host(), R"({"plugin": "1f1b", "plugn": 2})", "parallel.schedule"),
              KEEL_ERR_INVALID_CONFIG);
    EXPECT_NE(last_error().find("parallel.schedule.plugn: unknown key (did you mean \"plugin\"?)"), std::string::npos)
        << last_error();
    EXPECT_EQ(plugin.api().validate_config(plugin.host(), "[1]", "parallel.schedule"), KEEL_ERR_INVALID_CONFIG);
    EXPECT_EQ(last_error(), "schedule " + name + ": parallel.schedule: expected an object, found an array");
    // check_shape and build read the same section, so they refuse it too.
    const keel_schedule_shape shape = make_shape(2, 4, 0, name == "interleaved" ? 2 : 1);
    EXPECT_EQ(plugin.api().check_shape(plugin.host(), R"({"chunks": 2})", &shape), KEEL_ERR_INVALID_CONFIG);
    EXPECT_NE(last_error().find("parallel.schedule.chunks: unknown key"), std::string::npos) << last_error();
    size_t count = 0;
    EXPECT_EQ(plugin.api().build(plugin.host(), R"({"chunks": 2})", &shape, nullptr, 0, &count),
              KEEL_ERR_INVALID_CONFIG);
    EXPECT_NE(last_error().find("parallel.schedule.chunks: unknown key"), std::string::npos) << last_error();
  }
}

}  // namespace
}  // namespace keel_schedule_test
