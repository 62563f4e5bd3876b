// Where the zero strategy keeps what, for P = 1..4 ranks and every stage: owned ranges of all
// ranks tile each tensor exactly (every element owned once), describe reports the ZeRO paper's
// persistent bytes (padding included), every rank starts from the single-rank initial values,
// and host access refuses ranges a rank does not hold. Creation does not communicate, so all
// ranks are created on the test's thread.
#include <algorithm>

#include "zero_test_support.hpp"

namespace keel_test {
namespace {

struct Layout {
  int32_t ranks;
  int32_t stage;
};

std::string describe_layout(const Layout& l) {
  return "ranks" + std::to_string(l.ranks) + "_stage" + std::to_string(l.stage);
}
std::string layout_name(const ::testing::TestParamInfo<Layout>& info) { return describe_layout(info.param); }
void PrintTo(const Layout& l, std::ostream* os) { *os << describe_layout(l); }

class ZeroLayoutTest : public ::testing::TestWithParam<Layout> {
 protected:
  void SetUp() override {
    for (int32_t r = 0; r < GetParam().ranks; ++r) {
      ranks.push_back(plugins.make_rank(&world, r));
      ASSERT_EQ(ranks.back()->create(stage_config(GetParam().stage)), KEEL_OK) << zero_last_error();
    }
  }

  ZeroPlugins plugins;
  ThreadWorld world{GetParam().ranks};
  std::vector<std::unique_ptr<ZeroRank>> ranks;
};

TEST_P(ZeroLayoutTest, OwnedRangesTileEveryTensor) {
  const int32_t stage = GetParam().stage;
  for (int32_t kind : {-1, 0}) {  // the parameter, and sgd's momentum slot
    for (size_t i = 0; i < kParamNumel.size(); ++i) {
      SCOPED_TRACE("kind " + std::to_string(kind) + ", parameter " + std::to_string(i));
      std::vector<std::pair<int64_t, int64_t>> pieces;
      for (auto& rank : ranks) pieces.push_back(rank->owned(kind, i));
      if (kind == -1 && stage < 3) {  // replicated: every rank holds it whole
        for (auto& piece : pieces) EXPECT_EQ(piece, std::make_pair(int64_t(0), kParamNumel[i]));
        continue;
      }
      pieces.erase(std::remove_if(pieces.begin(), pieces.end(), [](auto& p) { return p.first == p.second; }),
                   pieces.end());
      std::sort(pieces.begin(), pieces.end());
      int64_t covered = 0;
      for (auto& piece : pieces) {
        EXPECT_EQ(piece.first, covered) << "a gap or an overlap";
        EXPECT_LT(piece.first, piece.second);
        covered = piece.second;
      }
      EXPECT_EQ(covered, kParamNumel[i]);
    }
  }
}

TEST_P(ZeroLayoutTest, OwnedRangesFollowEachLayersEqualChunks) {
  // head.w is elements [0, 24) of layer 3 (29 elements); rank r owns [r*c, (r+1)*c) of the layer.
  const int32_t p = GetParam().ranks;
  const int64_t chunk = (29 + p - 1) / p;
  for (auto& rank : ranks) {
    const int64_t begin = std::min<int64_t>(rank->rank() * chunk, 24), end = std::min<int64_t>((rank->rank() + 1) * chunk, 24);
    const auto owned = rank->owned(0, 5);
    if (begin == end) EXPECT_EQ(owned.first, owned.second);
    else EXPECT_EQ(owned, std::make_pair(begin, end)) << "rank " << rank->rank();
  }
}

TEST_P(ZeroLayoutTest, DescribeReportsPersistentBytes) {
  const int32_t p = GetParam().ranks, stage = GetParam().stage;
  const uint64_t full_bytes = 4 * uint64_t(padded_elements(p));  // 4Ψ with padding
  const uint64_t shard_bytes = full_bytes / uint64_t(p);          // 4Ψ/N: every chunk is padded/N
  for (auto& rank : ranks) {
    const keel_strategy_info info = rank->describe();
    EXPECT_EQ(info.params_resident, stage < 3 ? 1 : 0);
    EXPECT_EQ(info.param_bytes, stage < 3 ? full_bytes : shard_bytes);
    EXPECT_EQ(info.grad_bytes, stage < 2 ? full_bytes : shard_bytes);
    EXPECT_EQ(info.state_bytes, shard_bytes) << "one momentum slot";
  }
}

TEST_P(ZeroLayoutTest, EveryRankStartsFromTheSingleRankValues) {
  for (auto& rank : ranks) {
    for (size_t i = 0; i < kParamNumel.size(); ++i) {
      const auto [begin, end] = rank->owned(-1, i);
      std::vector<float> values(size_t(end - begin));
      ASSERT_EQ(plugins.zero_api().read_param(rank->strategy, i, begin, end - begin, values.data()), KEEL_OK)
          << zero_last_error();
      for (int64_t e = begin; e < end; ++e)
        ASSERT_EQ(values[size_t(e - begin)], zero_init_value(rank->specs[i], e)) << rank->specs[i].name << "[" << e << "]";
    }
  }
}

TEST_P(ZeroLayoutTest, HostAccessStaysWithinWhatARankHolds) {
  const auto& api = plugins.zero_api();
  const int32_t stage = GetParam().stage;
  std::vector<float> buffer(32, 0.0f);
  for (auto& rank : ranks) {
    SCOPED_TRACE("rank " + std::to_string(rank->rank()));
    const size_t head_w = 5;
    const auto [begin, end] = rank->owned(0, head_w);
    const bool whole = end - begin == 24;
    // The whole tensor: always fine below stage 3, refused when sharded.
    const keel_status whole_read = api.read_param(rank->strategy, head_w, 0, 24, buffer.data());
    if (stage < 3 || whole) {
      EXPECT_EQ(whole_read, KEEL_OK) << zero_last_error();
    } else {
      EXPECT_EQ(whole_read, KEEL_ERR_INVALID_ARGUMENT);
      EXPECT_NE(zero_last_error().find("is sharded"), std::string::npos) << zero_last_error();
      EXPECT_EQ(api.write_param(rank->strategy, head_w, 0, 24, buffer.data()), KEEL_ERR_INVALID_ARGUMENT);
    }
    if (!whole) {
      EXPECT_EQ(api.read_state(rank->strategy, 0, head_w, 0, 24, buffer.data()), KEEL_ERR_INVALID_ARGUMENT);
      EXPECT_NE(zero_last_error().find("optimizer state is sharded"), std::string::npos) << zero_last_error();
    }
    // Any sub-range of the owned range round-trips.
    if (end - begin >= 2) {
      const float written[2] = {4.5f, -1.25f};
      float read[2] = {};
      ASSERT_EQ(api.write_state(rank->strategy, 0, head_w, begin + 1, 1, written), KEEL_OK) << zero_last_error();
      ASSERT_EQ(api.read_state(rank->strategy, 0, head_w, begin, 2, read), KEEL_OK) << zero_last_error();
      EXPECT_EQ(read[0], 0.0f);
      EXPECT_EQ(read[1], 4.5f);
      ASSERT_EQ(api.write_param(rank->strategy, head_w, begin, 2, written), KEEL_OK) << zero_last_error();
      ASSERT_EQ(api.read_param(rank->strategy, head_w, begin, 2, read), KEEL_OK) << zero_last_error();
      EXPECT_EQ(read[1], -1.25f);
    }
    int64_t b = 0, e = 0;
    EXPECT_EQ(api.owned_range(rank->strategy, 1, head_w, &b, &e), KEEL_ERR_INVALID_ARGUMENT) << "sgd has one slot";
    EXPECT_EQ(api.owned_range(rank->strategy, -1, 7, &b, &e), KEEL_ERR_INVALID_ARGUMENT) << "7 parameters";
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, ZeroLayoutTest,
                         ::testing::Values(Layout{1, 1}, Layout{1, 2}, Layout{1, 3}, Layout{2, 1}, Layout{2, 2},
                                           Layout{2, 3}, Layout{3, 1}, Layout{3, 2}, Layout{3, 3}, Layout{4, 1},
                                           Layout{4, 2}, Layout{4, 3}),
                         layout_name);

}  // namespace
}  // namespace keel_test
