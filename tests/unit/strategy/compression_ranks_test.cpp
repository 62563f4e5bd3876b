// ddp's compressing variants across data-parallel ranks (thread_comm: ranks as threads), against
// references written here from the papers' rules:
// - topk below the dense break-even sends (index, value) pairs: every rank then holds the mean
//   of each rank's top-k of (gradient + residual), chosen by a full sort (the plugin uses
//   nth_element), and keeps the rest as its residual for the next step;
// - topk at ratio 1.0 moves what ddp moves and holds ddp's mean exactly;
// - powersgd at full rank holds the mean within 1e-6 relative; at rank 1 every matrix's result
//   has rank 1, and on every rank result + residual is what that rank had to send.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ddp_ranks_fixture.hpp"

namespace keel_test {
namespace {

// Rank r's gradient at step s, element e of the flat array: distinct per rank and step, with ties.
float gradient_value(int32_t rank, int32_t step, int64_t e) {
  return float((e * 7 + rank * 3 + step) % 11) - 5.0f + 0.01f * float(rank) - 0.001f * float(e % 5);
}

class CompressionRanksTest : public DdpRanksTest {
 protected:
  explicit CompressionRanksTest(const char* name) : DdpRanksTest(name) {}

  // One backward on rank r: every layer acquired once, its gradients set, released final.
  void backward(int32_t r, int32_t step) {
    DdpRank& rank = *ranks[size_t(r)];
    ASSERT_EQ(api.zero_grads(rank.strategy), KEEL_OK) << thread_last_error();
    ASSERT_EQ(api.begin_microbatch(rank.strategy, 0, 1), KEEL_OK) << thread_last_error();
    for (int32_t layer = kToyLayers - 1; layer >= 0; --layer) {
      std::vector<size_t> in_layer;
      for (size_t i = 0; i < specs.size(); ++i)
        if (specs[i].layer == layer) in_layer.push_back(i);
      std::vector<keel_tensor> params(in_layer.size()), grads(in_layer.size());
      ASSERT_EQ(rank.access.acquire(rank.access.ctx, layer, KEEL_PHASE_BACKWARD, params.data(), grads.data(),
                                    in_layer.size()), KEEL_OK) << thread_last_error();
      for (size_t k = 0; k < in_layer.size(); ++k)
        for (int64_t e = 0; e < kToyNumel[in_layer[k]]; ++e)
          static_cast<float*>(grads[k].data)[e] = gradient_value(r, step, kToyOffsets[in_layer[k]] + e);
      ASSERT_EQ(rank.access.release(rank.access.ctx, layer, KEEL_PHASE_BACKWARD, 1), KEEL_OK) << thread_last_error();
    }
  }

  void run_steps(int32_t steps) {
    world->run([&](int32_t r) {
      for (int32_t step = 1; step <= steps; ++step) {
        backward(r, step);
        double sum_squares = 0;
        ASSERT_EQ(api.grad_sq_norm(ranks[size_t(r)]->strategy, &sum_squares), KEEL_OK) << thread_last_error();
        keel_strategy_step_args args{sizeof(args), 0.1f, 1.0f, step};
        ASSERT_EQ(api.step(ranks[size_t(r)]->strategy, &args), KEEL_OK) << thread_last_error();
      }
    });
  }

  std::vector<float> flat_grads(int32_t r) {
    std::vector<float> out;
    for (size_t i = 0; i < specs.size(); ++i) {
      const std::vector<float> g = read_grad(r, i);
      out.insert(out.end(), g.begin(), g.end());
    }
    return out;
  }

  std::vector<float> own_state(int32_t r, int32_t index) {
    const char* name = nullptr;
    int64_t count = -1;
    EXPECT_EQ(api.own_state_info(ranks[size_t(r)]->strategy, index, &name, &count), KEEL_OK) << thread_last_error();
    std::vector<float> values(size_t(std::max<int64_t>(count, 0)));
    EXPECT_EQ(api.read_own_state(ranks[size_t(r)]->strategy, index, values.data()), KEEL_OK) << thread_last_error();
    return values;
  }
};

class TopkRanksTest : public CompressionRanksTest {
 protected:
  TopkRanksTest() : CompressionRanksTest("topk") {}
};

class PowerSgdRanksTest : public CompressionRanksTest {
 protected:
  PowerSgdRanksTest() : CompressionRanksTest("powersgd") {}
};

// The reference: each rank's residual and the mean of what they sent, step by step.
std::vector<float> topk_reference(int32_t P, int32_t steps, int64_t k, std::vector<std::vector<float>>& residuals) {
  residuals.assign(size_t(P), std::vector<float>(size_t(kToyTotal), 0.0f));
  std::vector<float> sum;
  for (int32_t step = 1; step <= steps; ++step) {
    sum.assign(size_t(kToyTotal), 0.0f);
    for (int32_t r = 0; r < P; ++r) {
      std::vector<float> v(static_cast<size_t>(kToyTotal));
      for (int64_t e = 0; e < kToyTotal; ++e) v[size_t(e)] = gradient_value(r, step, e) + residuals[size_t(r)][size_t(e)];
      std::vector<int64_t> order(static_cast<size_t>(kToyTotal));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return std::fabs(v[size_t(a)]) > std::fabs(v[size_t(b)]); });
      std::vector<char> chosen(static_cast<size_t>(kToyTotal), 0);
      for (int64_t j = 0; j < k; ++j) chosen[size_t(order[size_t(j)])] = 1;
      for (int64_t e = 0; e < kToyTotal; ++e) residuals[size_t(r)][size_t(e)] = chosen[size_t(e)] ? 0.0f : v[size_t(e)];
      // Summed in rank order, element by element, as the plugin's scatter-add does.
      for (int64_t e = 0; e < kToyTotal; ++e)
        if (chosen[size_t(e)]) sum[size_t(e)] += v[size_t(e)];
    }
  }
  for (float& x : sum) x *= 1.0f / float(P);
  return sum;
}

TEST_F(TopkRanksTest, SparsePairsGiveTheMeanOfEachRanksTopKWithErrorFeedback) {
  for (int32_t P : {2, 3}) {
    SCOPED_TRACE("P " + std::to_string(P));
    ranks.clear();
    // One bucket of all 130 gradients; k = round(0.2 × 130) = 26 pairs, below the dense break-even.
    ASSERT_EQ(create_ranks(P, R"({"plugin": "topk", "ratio": 0.2, "bucket_mb": 1000})"), KEEL_OK) << thread_last_error();
    run_steps(3);
    std::vector<std::vector<float>> residuals;
    const std::vector<float> expected = topk_reference(P, 3, 26, residuals);
    for (int32_t r = 0; r < P; ++r) {
      const std::vector<float> got = flat_grads(r);
      for (int64_t e = 0; e < kToyTotal; ++e)
        ASSERT_FLOAT_EQ(got[size_t(e)], expected[size_t(e)]) << "rank " << r << ", element " << e;
      EXPECT_EQ(got, flat_grads(0)) << "rank " << r << " differs from rank 0";
      EXPECT_EQ(own_state(r, 0), residuals[size_t(r)]) << "rank " << r << "'s residual";
      EXPECT_EQ(counters(r).calls[KEEL_COMM_ALL_GATHER], 3u * 2u) << "values and positions, each step";
      EXPECT_EQ(counters(r).calls[KEEL_COMM_ALL_REDUCE], 0u);
    }
    for (auto& rank : ranks) api.destroy(rank->strategy), rank->strategy = nullptr;
  }
}

TEST_F(TopkRanksTest, RatioOneMovesAndHoldsExactlyWhatDdpDoes) {
  ASSERT_EQ(create_ranks(3, R"({"plugin": "topk", "ratio": 1.0, "bucket_mb": 0.0002})"), KEEL_OK) << thread_last_error();
  run_steps(2);
  for (int32_t r = 0; r < 3; ++r) {
    const std::vector<float> got = flat_grads(r);
    for (int64_t e = 0; e < kToyTotal; ++e) {
      const float mean = (gradient_value(0, 2, e) + gradient_value(1, 2, e) + gradient_value(2, 2, e)) * (1.0f / 3.0f);
      ASSERT_EQ(got[size_t(e)], mean) << "rank " << r << ", element " << e;
    }
    for (float x : own_state(r, 0)) ASSERT_EQ(x, 0.0f) << "nothing is left unsent";
    // ddp's traffic: 2 buckets a step, twice the gradient bytes (ddp_ranks_test.cpp).
    EXPECT_EQ(counters(r).calls[KEEL_COMM_ALL_REDUCE], 2u * 2u);
    EXPECT_EQ(counters(r).bytes[KEEL_COMM_ALL_REDUCE], 2u * 2u * sizeof(float) * kToyTotal);
  }
}

TEST_F(PowerSgdRanksTest, FullRankGivesTheMean) {
  ASSERT_EQ(create_ranks(3, R"({"plugin": "powersgd", "rank": 16})"), KEEL_OK) << thread_last_error();
  run_steps(3);
  for (int32_t r = 0; r < 3; ++r) {
    const std::vector<float> got = flat_grads(r);
    for (int64_t e = 0; e < kToyTotal; ++e) {
      const double mean = (double(gradient_value(0, 3, e)) + gradient_value(1, 3, e) + gradient_value(2, 3, e)) / 3.0;
      ASSERT_NEAR(got[size_t(e)], mean, 1e-6 * std::max(1.0, std::fabs(mean))) << "rank " << r << ", element " << e;
    }
  }
}

TEST_F(PowerSgdRanksTest, RankOneFactorsAndResidualAddUpToWhatEachRankHadToSend) {
  ASSERT_EQ(create_ranks(2, R"({"plugin": "powersgd", "rank": 1})"), KEEL_OK) << thread_last_error();
  run_steps(1);  // the residual starts at zero, so rank r had gradient_value(r, 1, e) to send
  for (int32_t r = 0; r < 2; ++r) {
    const std::vector<float> got = flat_grads(r), residual = own_state(r, 0);
    EXPECT_EQ(got, flat_grads(0));
    for (size_t i = 0; i < specs.size(); ++i) {
      const int64_t at = kToyOffsets[i], n = kToyNumel[i];
      if (specs[i].ndim < 2) {  // vectors travel whole: the exact mean, nothing left behind
        for (int64_t e = at; e < at + n; ++e) {
          EXPECT_EQ(got[size_t(e)], (gradient_value(0, 1, e) + gradient_value(1, 1, e)) * 0.5f) << specs[i].name;
          EXPECT_EQ(residual[size_t(e)], 0.0f) << specs[i].name;
        }
        continue;
      }
      const int64_t rows = specs[i].global_shape[0], cols = n / rows;
      for (int64_t e = at; e < at + n; ++e)
        EXPECT_NEAR(got[size_t(e)] + residual[size_t(e)], gradient_value(r, 1, e), 1e-5) << specs[i].name;
      // Every 2 × 2 minor of a rank-1 matrix vanishes.
      for (int64_t a = 1; a < rows; ++a)
        for (int64_t b = 1; b < cols; ++b) {
          const double minor = double(got[size_t(at)]) * got[size_t(at + a * cols + b)] -
                               double(got[size_t(at + b)]) * got[size_t(at + a * cols)];
          EXPECT_NEAR(minor, 0.0, 1e-4) << specs[i].name << " is not rank 1";
        }
    }
  }
}

}  // namespace
}  // namespace keel_test
