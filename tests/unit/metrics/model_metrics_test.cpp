// A model's step metrics (train/model_metrics.h) combined over a data-parallel group: two ranks
// as threads over the in-process communicator, each value checked against its rule worked by hand
// (mean: the ranks' sum halved, max: the larger), and a rank whose names differ refused by name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "host/errors.h"
#include "thread_comm.hpp"
#include "train/model_metrics.h"

namespace {

using keel::ModelMetric;

keel::CommGroup group_of(keel_test::ThreadWorld& world, int32_t rank) {
  return keel::CommGroup{world.api(), world.comm(rank), rank, world.size(), "data-parallel group"};
}

TEST(ModelMetrics, TwoRanksCombineEachValueByItsRule) {
  keel_test::ThreadWorld world(2);
  // Rank r's aux_loss is 0.25 + r, its load 1.5 · (2 - r): mean 0.75, max 3.
  std::vector<std::vector<ModelMetric>> combined(2);
  world.run([&](int32_t r) {
    const std::vector<ModelMetric> mine = {{"aux_loss", 0.25 + r, KEEL_METRIC_MEAN},
                                           {"expert_load.max_over_mean", 1.5 * (2 - r), KEEL_METRIC_MAX}};
    combined[size_t(r)] = keel::combine_model_metrics(group_of(world, r), mine);
  });
  for (const auto& metrics : combined) {
    ASSERT_EQ(metrics.size(), 2u);
    EXPECT_EQ(metrics[0].name, "aux_loss");
    EXPECT_EQ(metrics[0].value, 0.75);
    EXPECT_EQ(metrics[1].name, "expert_load.max_over_mean");
    EXPECT_EQ(metrics[1].value, 3.0);
  }
}

TEST(ModelMetrics, EveryRankTakesPartInAnEmptyStep) {
  keel_test::ThreadWorld world(2);
  world.run([&](int32_t r) { EXPECT_TRUE(keel::combine_model_metrics(group_of(world, r), {}).empty()); });
}

TEST(ModelMetrics, ValuesTravelBitForBit) {
  const double third = 1.0 / 3.0;
  keel_test::ThreadWorld world(2);
  world.run([&](int32_t r) {
    const auto out = keel::combine_model_metrics(group_of(world, r), {{"x", third, KEEL_METRIC_MAX}});
    EXPECT_EQ(out.at(0).value, third);
  });
}

TEST(ModelMetrics, AMismatchNamesTheRankAndTheMetric) {
  const std::vector<std::vector<ModelMetric>> per_rank = {
      {{"aux_loss", 1, KEEL_METRIC_MEAN}}, {{"aux_loss", 1, KEEL_METRIC_MEAN}}, {{"z_loss", 1, KEEL_METRIC_MEAN}}};
  try {
    keel::combine_gathered_metrics(per_rank);
    FAIL() << "a mismatch was accepted";
  } catch (const keel::KeelError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 0 reports \"aux_loss\" (mean) and rank 2 reports \"z_loss\" (mean)"), std::string::npos)
        << what;
  }
  // A rank reporting nothing while another reports a metric is a mismatch too.
  EXPECT_THROW(keel::combine_gathered_metrics({{{"aux_loss", 1, KEEL_METRIC_MEAN}}, {}}), keel::KeelError);
  // So is the same name under another rule.
  EXPECT_THROW(keel::combine_gathered_metrics({{{"a", 1, KEEL_METRIC_MEAN}}, {{"a", 1, KEEL_METRIC_MAX}}}),
               keel::KeelError);
}

}  // namespace
