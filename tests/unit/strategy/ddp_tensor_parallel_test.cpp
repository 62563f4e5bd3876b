// ddp under tensor parallelism (ABI 0.6): a parameter is this rank's piece (local_offset +
// local_shape of the global tensor), initialised through host->init_piece with the numbers the
// whole tensor has there, and grad_sq_norm counts a tp-replicated parameter only on tp rank 0.
#include <keel_support/common/piece_box.hpp>

#include <cmath>

#include "ddp_test_fixture.hpp"

namespace keel_test {
namespace {

// The test host's init_piece: the whole tensor's test_init_value at each piece element's
// global flat index.
keel_status pattern_init_piece(const keel_param_spec* spec, uint64_t, int64_t begin, int64_t count, float* out) {
  const keel_support::PieceBox box = keel_support::PieceBox::of_spec(*spec);
  for (int64_t i = 0; i < count; ++i) out[i] = test_init_value(*spec, box.global_index(begin + i));
  return KEEL_OK;
}

int64_t piece_numel(const keel_param_spec& spec) {
  int64_t n = 1;
  for (int32_t d = 0; d < spec.ndim; ++d) n *= spec.local_shape[d];
  return n;
}

class DdpTensorParallelTest : public DdpTest {
 public:
  DdpTensorParallelTest() { host.init_piece = pattern_init_piece; }

  // h.0.fc.weight (6 x 4) split by columns: this rank holds columns [2, 4).
  void split_fc_weight_by_columns() {
    keel_param_spec& w = specs[4];
    w.tp_dim = 1;
    w.local_shape[1] = 2;
    w.local_offset[1] = 2;
  }

  std::vector<float> read_piece(size_t index) {
    std::vector<float> values(size_t(piece_numel(specs[index])));
    EXPECT_EQ(api.read_param(strategy, index, 0, piece_numel(specs[index]), values.data()), KEEL_OK) << last_error();
    return values;
  }

  // Every gradient element of every layer set to 1 + its parameter index.
  void fill_gradients() {
    for (int32_t layer = 0; layer < n_layers; ++layer) {
      std::vector<size_t> indices;
      for (size_t i = 0; i < specs.size(); ++i)
        if (specs[i].layer == layer) indices.push_back(i);
      std::vector<keel_tensor> grads = acquire_grads(layer, indices.size());
      for (size_t k = 0; k < indices.size(); ++k)
        for (int64_t e = 0; e < piece_numel(specs[indices[k]]); ++e)
          static_cast<float*>(grads[k].data)[e] = float(1 + indices[k]);
      ASSERT_EQ(access.release(access.ctx, layer, KEEL_PHASE_BACKWARD, 1), KEEL_OK) << last_error();
    }
  }

  double grad_norm_of(const std::vector<size_t>& indices) const {
    double sum = 0.0;
    for (size_t i : indices) sum += double(piece_numel(specs[i])) * double(1 + i) * double(1 + i);
    return sum;
  }
};

TEST_F(DdpTensorParallelTest, PieceHoldsTheWholeTensorsElementsAtItsOffset) {
  split_fc_weight_by_columns();
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  // The whole tensor, as init_param makes it for a single rank.
  keel_param_spec whole = specs[4];
  whole.local_shape[1] = 4;
  whole.local_offset[1] = 0;
  std::vector<float> full(24);
  ASSERT_EQ(pattern_init_param(&whole, kSeed, 0, 24, full.data()), KEEL_OK);
  const std::vector<float> piece = read_piece(4);
  ASSERT_EQ(piece.size(), 12u);
  for (int64_t row = 0; row < 6; ++row)
    for (int64_t col = 0; col < 2; ++col)
      EXPECT_EQ(piece[size_t(row * 2 + col)], full[size_t(row * 4 + 2 + col)]) << "row " << row << ", column " << col;
  // Piece-local ranges: the last element is 11, and 12 does not fit.
  float value = 0;
  EXPECT_EQ(api.read_param(strategy, 4, 11, 1, &value), KEEL_OK) << last_error();
  EXPECT_EQ(api.read_param(strategy, 4, 12, 1, &value), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("has 12 elements"), std::string::npos) << last_error();
  int64_t begin = -1, end = -1;
  ASSERT_EQ(api.owned_range(strategy, -1, 4, &begin, &end), KEEL_OK) << last_error();
  EXPECT_EQ(begin, 0);
  EXPECT_EQ(end, 12);
}

TEST_F(DdpTensorParallelTest, AcquireHandsOutThePiecesShape) {
  split_fc_weight_by_columns();
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  std::vector<keel_tensor> params(4), grads(4);
  ASSERT_EQ(access.acquire(access.ctx, 1, KEEL_PHASE_FORWARD, params.data(), grads.data(), 4), KEEL_OK) << last_error();
  EXPECT_EQ(params[2].shape[0], 6);
  EXPECT_EQ(params[2].shape[1], 2);
  // The next parameter starts right after the 12-element piece.
  EXPECT_EQ(static_cast<float*>(params[3].data) - static_cast<float*>(params[2].data), 12);
}

TEST_F(DdpTensorParallelTest, PieceOutsideTheGlobalShapeIsRefusedByName) {
  split_fc_weight_by_columns();
  specs[4].local_offset[1] = 3;  // columns [3, 5) of 4
  EXPECT_EQ(create(), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("parameter 4 (\"h.0.fc.weight\"): the piece local_offset + local_shape (0+6 of 6, "
                              "3+2 of 4) does not lie inside global_shape"),
            std::string::npos)
      << last_error();
  EXPECT_EQ(backend.live_allocations, 0);
}

TEST_F(DdpTensorParallelTest, PieceOnAHostWithoutInitPieceIsRefused) {
  host.init_piece = nullptr;
  split_fc_weight_by_columns();
  EXPECT_EQ(create(), KEEL_ERR_UNIMPLEMENTED);
  EXPECT_NE(last_error().find("parameter 4 (\"h.0.fc.weight\"): a tensor-parallel piece needs the host's init_piece"),
            std::string::npos)
      << last_error();
  EXPECT_EQ(backend.live_allocations, 0);
}

TEST_F(DdpTensorParallelTest, GradNormLeavesReplicatedParametersToTpRankZero) {
  split_fc_weight_by_columns();
  tp_rank = 1;
  tp_size = 2;
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  fill_gradients();
  double sum_squares = -1;
  ASSERT_EQ(api.grad_sq_norm(strategy, &sum_squares), KEEL_OK) << last_error();
  EXPECT_EQ(sum_squares, grad_norm_of({4}));  // only the column-split weight: 12 x 5²
  EXPECT_EQ(sum_squares, 300.0);
}

TEST_F(DdpTensorParallelTest, GradNormOnTpRankZeroCountsEveryParameter) {
  split_fc_weight_by_columns();
  tp_rank = 0;
  tp_size = 2;
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  fill_gradients();
  double sum_squares = -1;
  ASSERT_EQ(api.grad_sq_norm(strategy, &sum_squares), KEEL_OK) << last_error();
  EXPECT_EQ(sum_squares, grad_norm_of({0, 1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST_F(DdpTensorParallelTest, TpRankOutsideTheGroupIsRefused) {
  tp_rank = 2;
  tp_size = 2;
  EXPECT_EQ(create(), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("tp_rank 2 is outside a tensor-parallel group of 2"), std::string::npos) << last_error();
}

}  // namespace
}  // namespace keel_test
