// ZeRO under tensor parallelism (ABI 0.6), stages 1-3 on 1 and 2 data-parallel ranks: a
// parameter is this rank's piece, sharded over the dp group like a whole tensor, initialised
// through host->init_piece with the whole tensor's numbers; grad_sq_norm, reduced over the dp
// group, leaves tp-replicated parameters to tp rank 0 (every rank of a dp group shares its tp rank).
#include "zero_rank_driver.hpp"

namespace keel_test {
namespace {

constexpr size_t kHeadW = 5;  // head.w, 4 x 6, layer 3

struct TpCase {
  int32_t stage;
  int32_t dp;
};

std::string case_name(const ::testing::TestParamInfo<TpCase>& info) {
  return "Stage" + std::to_string(info.param.stage) + "Dp" + std::to_string(info.param.dp);
}

int64_t piece_numel(const keel_param_spec& spec) {
  int64_t n = 1;
  for (int32_t d = 0; d < spec.ndim; ++d) n *= spec.local_shape[d];
  return n;
}

class ZeroTensorParallelTest : public ::testing::TestWithParam<TpCase> {
 protected:
  // Runs `body(rank)` on every dp rank, each created as tp rank `tp_rank` of 2 with head.w cut
  // to its columns [3, 6).
  template <typename Body>
  void on_ranks(int32_t tp_rank, Body&& body) {
    const TpCase c = GetParam();
    ThreadWorld world(c.dp);
    world.run([&](int32_t r) {
      auto rank = plugins.make_rank(c.dp > 1 ? &world : nullptr, r);
      keel_param_spec& w = rank->specs[kHeadW];
      w.tp_dim = 1;
      w.local_shape[1] = 3;
      w.local_offset[1] = 3;
      rank->tp_rank = tp_rank;
      rank->tp_size = 2;
      if (rank->create(stage_config(c.stage)) != KEEL_OK) throw std::runtime_error("create failed: " + zero_last_error());
      body(*rank);
    });
  }

  // One backward over every layer, each gradient element 1 + its parameter index on every rank
  // (so the dp mean is the same), then the strategy's norm.
  static double norm_after_backward(ZeroRank& rank) {
    const keel_param_access& a = rank.access;
    for (int32_t layer = kZeroLayers - 1; layer >= 0; --layer) {
      std::vector<size_t> indices;
      for (size_t i = 0; i < rank.specs.size(); ++i)
        if (rank.specs[i].layer == layer) indices.push_back(i);
      std::vector<keel_tensor> params(indices.size()), grads(indices.size());
      if (a.acquire(a.ctx, layer, KEEL_PHASE_BACKWARD, params.data(), grads.data(), indices.size()) != KEEL_OK)
        throw std::runtime_error("acquire: " + zero_last_error());
      for (size_t k = 0; k < indices.size(); ++k)
        for (int64_t e = 0; e < piece_numel(rank.specs[indices[k]]); ++e)
          static_cast<float*>(grads[k].data)[e] += float(1 + indices[k]);
      if (a.release(a.ctx, layer, KEEL_PHASE_BACKWARD, 1) != KEEL_OK)
        throw std::runtime_error("release: " + zero_last_error());
    }
    double norm = -1.0;
    if (rank.api().grad_sq_norm(rank.strategy, &norm) != KEEL_OK)
      throw std::runtime_error("grad_sq_norm: " + zero_last_error());
    return norm;
  }

  ZeroPlugins plugins;
};

TEST_P(ZeroTensorParallelTest, GradNormLeavesReplicatedParametersToTpRankZero) {
  // tp rank 1: only head.w's piece (12 elements of 6²) counts.
  on_ranks(1, [&](ZeroRank& rank) { EXPECT_EQ(norm_after_backward(rank), 12.0 * 36.0) << "rank " << rank.rank(); });
  // tp rank 0: every parameter, head.w as its 12-element piece.
  double every = 0.0;
  const std::vector<int64_t> numel = {5, 2, 9, 4, 1, 12, 5};
  for (size_t i = 0; i < numel.size(); ++i) every += double(numel[i]) * double((1 + i) * (1 + i));
  on_ranks(0, [&](ZeroRank& rank) { EXPECT_EQ(norm_after_backward(rank), every) << "rank " << rank.rank(); });
}

TEST_P(ZeroTensorParallelTest, OwnedPieceElementsAreTheWholeTensorsAtTheirOffset) {
  on_ranks(1, [&](ZeroRank& rank) {
    const keel_param_spec& w = rank.specs[kHeadW];
    const auto [begin, end] = rank.owned(-1, kHeadW);
    EXPECT_LE(end, 12) << "owned ranges are piece-local: the piece has 12 elements";
    if (GetParam().stage < 3) EXPECT_EQ(end - begin, 12) << "below stage 3 every rank holds the whole piece";
    std::vector<float> values(size_t(end - begin));
    ASSERT_EQ(rank.api().read_param(rank.strategy, kHeadW, begin, end - begin, values.data()),
              KEEL_OK)
        << zero_last_error();
    for (int64_t e = begin; e < end; ++e) {
      const int64_t row = e / 3, column = 3 + e % 3;  // the element's place in the 4 x 6 tensor
      EXPECT_EQ(values[size_t(e - begin)], zero_init_value(w, row * 6 + column)) << "piece element " << e;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroTensorParallelTest,
                         ::testing::Values(TpCase{1, 1}, TpCase{1, 2}, TpCase{2, 1}, TpCase{2, 2}, TpCase{3, 1},
                                           TpCase{3, 2}),
                         case_name);

}  // namespace
}  // namespace keel_test
