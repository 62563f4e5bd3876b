// The worked example examples/plugins/schedule-1f1b, built here from its sources as a third party
// builds it, against the built-in "1f1b" through both C tables: the same list, action for
// action, over a sweep of shapes (so a run with either trains to the same losses), every list
// passing the all-rank simulation, and the example's refusals (virtual stages, unknown keys).
#include <gtest/gtest.h>
#include <keel/schedule.h>
#include <keel_support/schedule/schedule_check.hpp>

#include <string>
#include <vector>

#include "plugin_test_support.hpp"

namespace {

using keel_test::last_error;
using keel_test::LoadedPlugin;

const char* const kConfig = R"({"plugin": "my-1f1b"})";

std::vector<keel_schedule_action> build_list(const keel_schedule_api& api, const keel_host& host,
                                             const keel_schedule_shape& shape) {
  size_t count = 0;
  EXPECT_EQ(api.build(&host, kConfig, &shape, nullptr, 0, &count), KEEL_OK) << last_error();
  std::vector<keel_schedule_action> list(count);
  EXPECT_EQ(api.build(&host, kConfig, &shape, list.data(), list.size(), &count), KEEL_OK) << last_error();
  return list;
}

std::string describe(const keel_schedule_action& a) {
  return "{kind " + std::to_string(a.kind) + ", mb " + std::to_string(a.microbatch) + ", chunk " +
         std::to_string(a.chunk) + ", peer " + std::to_string(a.peer_stage) + ", flags " + std::to_string(a.flags) + "}";
}

class ExampleSchedule : public ::testing::Test {
 protected:
  LoadedPlugin example_{KEEL_EXAMPLE_SCHEDULE_PLUGIN_PATH, KEEL_KIND_SCHEDULE, "my-1f1b"};
  LoadedPlugin builtin_{KEEL_SCHEDULES_PLUGIN_PATH, KEEL_KIND_SCHEDULE, "1f1b"};
  keel_host host_ = keel_test::make_test_host();
};

TEST_F(ExampleSchedule, GivesTheBuiltIn1f1bListsOverASweep) {
  const auto& example = example_.api<keel_schedule_api>();
  const auto& builtin = builtin_.api<keel_schedule_api>();
  EXPECT_EQ(example.splits_backward, builtin.splits_backward);
  for (int p = 1; p <= 6; ++p) {
    for (int m = 1; m <= 12; ++m) {
      keel_support::ScheduleLists lists;
      for (int s = 0; s < p; ++s) {
        const keel_schedule_shape shape{sizeof(keel_schedule_shape), p, m, s, 1};
        const auto mine = build_list(example, host_, shape);
        const auto theirs = build_list(builtin, host_, shape);
        ASSERT_EQ(mine.size(), theirs.size()) << "pp " << p << ", m " << m << ", stage " << s;
        for (size_t i = 0; i < mine.size(); ++i)
          ASSERT_EQ(describe(mine[i]), describe(theirs[i])) << "pp " << p << ", m " << m << ", stage " << s
                                                            << ", action " << i;
        lists.push_back(mine);
      }
      const keel_support::ScheduleReport report = keel_support::simulate_schedule(lists, p, m, 1);
      EXPECT_TRUE(report.ok()) << "pp " << p << ", m " << m << ": " << report.first_problem();
    }
  }
}

TEST_F(ExampleSchedule, RefusesVirtualStagesAndUnknownKeys) {
  const auto& example = example_.api<keel_schedule_api>();
  const keel_schedule_shape interleaved{sizeof(keel_schedule_shape), 2, 4, 0, 2};
  EXPECT_EQ(example.check_shape(&host_, kConfig, &interleaved), KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(last_error().find("virtual_stages is 2, expected 1"), std::string::npos) << last_error();
  EXPECT_EQ(example.validate_config(&host_, kConfig, "parallel.schedule"), KEEL_OK) << last_error();
  EXPECT_EQ(example.validate_config(&host_, R"({"plugin": "my-1f1b", "depth": 3})", "parallel.schedule"),
            KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(last_error().find("parallel.schedule.depth"), std::string::npos) << last_error();
}

}  // namespace
