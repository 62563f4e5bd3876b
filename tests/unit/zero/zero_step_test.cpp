// A zero run on P = 1..4 ranks (threads over the fake communicator, or one rank without any)
// equals the single-rank run on the mean gradient, for every stage, with and without stage 3
// prefetch, with one and two micro-batches: parameters and momentum after two sgd steps agree
// within 1e-6 on every rank, grad_sq_norm is the mean gradient's Σ g² on every rank, and the
// comm counters show the ZeRO paper's per-step volumes exactly (Ψ = 4 bytes × padded elements).
#include <cmath>

#include "zero_reference.hpp"

namespace keel_test {
namespace {

struct Scenario {
  int32_t ranks;
  bool with_comm;
  int32_t stage;
  bool prefetch;
  int32_t micro_batches;
};

std::string describe_scenario(const Scenario& s) {
  return (s.with_comm ? "ranks" + std::to_string(s.ranks) : std::string("nocomm")) + "_stage" +
         std::to_string(s.stage) + (s.prefetch ? "" : "_noprefetch") + "_mb" + std::to_string(s.micro_batches);
}
std::string scenario_name(const ::testing::TestParamInfo<Scenario>& info) { return describe_scenario(info.param); }
void PrintTo(const Scenario& s, std::ostream* os) { *os << describe_scenario(s); }

class ZeroStepTest : public ::testing::TestWithParam<Scenario> {
 protected:
  // Runs every rank through the driver and returns their records.
  std::vector<RankRecord> run_ranks(const DriverOptions& options) {
    const Scenario& s = GetParam();
    std::vector<RankRecord> records(size_t(s.ranks));
    std::unique_ptr<ThreadWorld> world;
    if (s.with_comm) world = std::make_unique<ThreadWorld>(s.ranks);
    auto body = [&](int32_t r) {
      auto rank = plugins.make_rank(world.get(), r);
      if (rank->create(stage_config(s.stage, s.prefetch)) != KEEL_OK)
        throw std::runtime_error("create failed: " + zero_last_error());
      RankDriver driver(plugins.zero_api(), *rank, world ? world->api() : nullptr, world ? world->comm(r) : nullptr);
      records[size_t(r)] = driver.run(options);
    };
    if (world) world->run(body);
    else body(0);
    return records;
  }

  ZeroPlugins plugins;
};

void expect_near_all(const std::vector<float>& actual, const std::vector<float>& expected, int64_t first,
                     const std::string& what) {
  for (size_t k = 0; k < actual.size(); ++k)
    ASSERT_NEAR(actual[k], expected[size_t(first) + k], 1e-6) << what << "[" << first + int64_t(k) << "]";
}

TEST_P(ZeroStepTest, EveryRankMatchesTheSingleRankRunOnTheMeanGradient) {
  const Scenario& s = GetParam();
  DriverOptions options;
  options.micro_batches = s.micro_batches;
  const std::vector<RankRecord> records = run_ranks(options);
  const Reference ref = single_rank_reference(plugins, s.ranks, options);
  const std::vector<keel_param_spec> specs = zero_model_specs();

  for (size_t r = 0; r < records.size(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const RankRecord& rec = records[r];
    ASSERT_EQ(rec.norms.size(), ref.norms.size());
    for (size_t step = 0; step < ref.norms.size(); ++step)
      EXPECT_NEAR(rec.norms[step], ref.norms[step], 1e-6 * ref.norms[step]) << "grad_sq_norm at step " << step + 1;
    EXPECT_EQ(rec.norms, records[0].norms) << "grad_sq_norm is bit-identical on every rank";
    for (size_t i = 0; i < specs.size(); ++i) {
      expect_near_all(rec.params[i], ref.params[i], rec.owned[i].first, std::string(specs[i].name));
      expect_near_all(rec.momentum[i], ref.momentum[i], rec.state_owned[i].first, std::string(specs[i].name) + " momentum");
    }
    // Every forward — in stage 3 gathered on demand — saw the full current parameters.
    ASSERT_EQ(rec.seen.size(), ref.params_before.size());
    for (size_t step = 0; step < ref.params_before.size(); ++step)
      for (size_t i = 0; i < specs.size(); ++i)
        expect_near_all(rec.seen[step][i], ref.params_before[step][i], 0,
                        "forward of step " + std::to_string(step + 1) + ": " + specs[i].name);
  }
}

TEST_P(ZeroStepTest, CountersShowTheZeroPapersVolumes) {
  const Scenario& s = GetParam();
  if (!s.with_comm) GTEST_SKIP() << "no communicator, nothing to count";
  DriverOptions options;
  options.micro_batches = s.micro_batches;
  const std::vector<RankRecord> records = run_ranks(options);
  const uint64_t psi = 4 * uint64_t(padded_elements(s.ranks));  // Ψ: one full fp32 copy, padding included
  const uint64_t steps = uint64_t(options.steps), m = uint64_t(s.micro_batches);
  const uint64_t norm_bytes = s.ranks > 1 ? 8 * uint64_t(s.ranks) : 0;  // grad_sq_norm: each rank's double
  // Per step: stage 1 reduce_scatters once; stages 2/3 at every micro-batch's final releases.
  // Stages 1/2 all_gather the updated parameters once; stage 3 gathers every layer in each
  // micro-batch's forward and again in its backward (the tied layer 0 once per backward).
  const uint64_t reduce_scatter = s.ranks > 1 ? steps * (s.stage == 1 ? psi : m * psi) : 0;
  const uint64_t all_gather = s.ranks > 1 ? steps * ((s.stage < 3 ? psi : 2 * m * psi) + norm_bytes) : 0;
  for (size_t r = 0; r < records.size(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const keel_comm_counters& c = records[r].counters;
    EXPECT_EQ(c.bytes[KEEL_COMM_REDUCE_SCATTER], reduce_scatter);
    EXPECT_EQ(c.bytes[KEEL_COMM_ALL_GATHER], all_gather);
    EXPECT_EQ(c.bytes[KEEL_COMM_ALL_REDUCE], 0u);
    if (s.ranks > 1 && m == 1)  // the paper's per-step totals: 2Ψ (stages 1/2), 3Ψ (stage 3)
      EXPECT_EQ((c.bytes[KEEL_COMM_REDUCE_SCATTER] + c.bytes[KEEL_COMM_ALL_GATHER]) / steps - norm_bytes,
                (s.stage < 3 ? 2 : 3) * psi);
  }
}

std::vector<Scenario> all_scenarios() {
  std::vector<Scenario> scenarios;
  for (int32_t stage = 1; stage <= 3; ++stage) {
    for (int32_t micro_batches : {1, 2}) {
      scenarios.push_back({1, false, stage, true, micro_batches});
      for (int32_t ranks = 1; ranks <= 4; ++ranks) scenarios.push_back({ranks, true, stage, true, micro_batches});
    }
    if (stage == 3)
      for (int32_t ranks : {1, 3}) scenarios.push_back({ranks, true, stage, false, 2});
  }
  return scenarios;
}

INSTANTIATE_TEST_SUITE_P(Runs, ZeroStepTest, ::testing::ValuesIn(all_scenarios()), scenario_name);

}  // namespace
}  // namespace keel_test
