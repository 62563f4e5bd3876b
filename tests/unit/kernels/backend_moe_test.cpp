// The cpu backend's ABI 0.19 slots (a mixture-of-experts layer's ops) through its table, each
// against a reference written here: routing against a double softmax/sigmoid and a sort of the
// selection keys, its backward against central differences of that reference (softmax and
// sigmoid, normalised or not, with the balancing loss's per-expert score gradient and the router
// z-loss); the plan against a stable sort of the pairs by expert, with an expert that gets no
// token; the moves against fp32 loops, permute then unpermute the identity in values and gradients, and
// each move the other's adjoint (so the gradients the header states are the true ones); the
// grouped matmul bit for bit against matmul_forward_dt / matmul_backward_dt run per expert, at
// fp32 and bf16, on products big enough to be split over two threads. Bad expert indices,
// positions and shapes are refused naming the op and the entry.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "backend_plugin.h"
#include "bf16_reference.h"
#include "reference.h"

using namespace keel_test;

namespace {

constexpr keel_dtype kFp32{KEEL_DTYPE_FLOAT, 32, 1};
constexpr keel_dtype kBf16{KEEL_DTYPE_BFLOAT, 16, 1};

#define ASSERT_OK(call) ASSERT_EQ((call), KEEL_OK) << g_last_error

class BackendCpuMoe : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(backend_.status, KEEL_OK) << g_last_error;
    ASSERT_TRUE(api()->moe_route && api()->moe_route_backward && api()->moe_permute_plan && api()->moe_permute_dt &&
                api()->moe_unpermute_dt && api()->moe_unpermute_scale_backward_dt &&
                api()->grouped_matmul_forward_dt && api()->grouped_matmul_backward_dt)
        << "the cpu backend fills the 0.19 slots";
  }
  void* h() { return backend_.handle; }
  Backend backend_{R"({"peak_tflops": 1, "threads": 2})"};
};

// --- routing ---------------------------------------------------------------------------------

struct RouteCase {
  int64_t N;
  int32_t E, K, flags;
};

// The scores of one row in double: a softmax, or a sigmoid.
std::vector<double> reference_scores(const double* logits, int32_t E, bool sigmoid) {
  std::vector<double> s(E);
  if (sigmoid) {
    for (int32_t e = 0; e < E; ++e) s[e] = 1 / (1 + std::exp(-logits[e]));
    return s;
  }
  const double max = *std::max_element(logits, logits + E);
  double sum = 0;
  for (int32_t e = 0; e < E; ++e) sum += s[e] = std::exp(logits[e] - max);
  for (auto& x : s) x /= sum;
  return s;
}

// The K experts of largest key, largest first, a tie to the lower index (a stable sort).
std::vector<int32_t> reference_top_k(const std::vector<double>& key, int32_t K) {
  std::vector<int32_t> order(key.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return key[a] > key[b]; });
  order.resize(K);
  return order;
}

// The chosen experts' weights for fixed choices (normalised under the flag).
std::vector<double> reference_weights(const std::vector<double>& s, const int32_t* chosen, int32_t K, bool normalize) {
  std::vector<double> w(K);
  double sum = 0;
  for (int32_t j = 0; j < K; ++j) sum += w[j] = s[chosen[j]];
  if (normalize)
    for (auto& x : w) x /= sum;
  return w;
}

TEST_F(BackendCpuMoe, RouteChoosesTheTopKAndWeighsThem) {
  for (const RouteCase c : {RouteCase{9, 7, 2, 0}, RouteCase{9, 7, 2, KEEL_ROUTE_NORMALIZE}, RouteCase{6, 8, 3, KEEL_ROUTE_SIGMOID},
                            RouteCase{6, 8, 3, KEEL_ROUTE_SIGMOID | KEEL_ROUTE_NORMALIZE}, RouteCase{5, 4, 4, KEEL_ROUTE_NORMALIZE}}) {
    for (const bool biased : {false, true}) {
      const std::string what = "N " + std::to_string(c.N) + " E " + std::to_string(c.E) + " K " + std::to_string(c.K) +
                               " flags " + std::to_string(c.flags) + (biased ? " with a selection bias" : "");
      const auto logits = random_floats(c.N * c.E, 11 + c.flags, -3, 3);
      const auto bias = random_floats(c.E, 12, -0.5f, 0.5f);
      std::vector<float> weights(c.N * c.K), scores(c.N * c.E);
      std::vector<int32_t> experts(c.N * c.K);
      ASSERT_OK(api()->moe_route(h(), weights.data(), experts.data(), scores.data(), logits.data(),
                                 biased ? bias.data() : nullptr, c.N, c.E, c.K, c.flags));
      std::vector<double> want_scores, want_weights;
      std::vector<int32_t> want_experts;
      for (int64_t n = 0; n < c.N; ++n) {
        const auto l = to_double(std::vector<float>(logits.begin() + n * c.E, logits.begin() + (n + 1) * c.E));
        const auto s = reference_scores(l.data(), c.E, c.flags & KEEL_ROUTE_SIGMOID);
        auto key = s;
        if (biased)
          for (int32_t e = 0; e < c.E; ++e) key[e] += bias[e];
        const auto chosen = reference_top_k(key, c.K);
        const auto w = reference_weights(s, chosen.data(), c.K, c.flags & KEEL_ROUTE_NORMALIZE);
        want_scores.insert(want_scores.end(), s.begin(), s.end());
        want_experts.insert(want_experts.end(), chosen.begin(), chosen.end());
        want_weights.insert(want_weights.end(), w.begin(), w.end());
      }
      EXPECT_EQ(experts, want_experts) << what;
      expect_close(scores, want_scores, 1e-7, 1e-6, what + ": scores");
      expect_close(weights, want_weights, 1e-7, 1e-6, what + ": weights");
    }
  }
}

TEST_F(BackendCpuMoe, RouteBreaksTiesTowardTheLowerExpertAndTheBiasOnlyChooses) {
  const int32_t E = 5, K = 3;
  // Row 0: every logit equal, so every score ties. Row 1: expert 4 scores highest, but a bias
  // of -1 on it and +1 on expert 0 (the lowest score) chooses 0 first and 4 not at all.
  const std::vector<float> logits = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, -2.0f, 0.1f, 0.2f, 0.3f, 2.0f};
  const std::vector<float> bias = {1.0f, 0.0f, 0.0f, 0.0f, -1.0f};
  std::vector<float> weights(2 * K), scores(2 * E);
  std::vector<int32_t> experts(2 * K);
  ASSERT_OK(api()->moe_route(h(), weights.data(), experts.data(), scores.data(), logits.data(), bias.data(), 2, E, K, 0));
  EXPECT_EQ(experts, (std::vector<int32_t>{0, 1, 2, 0, 3, 2}));
  // The weights are the scores, without the bias.
  for (int32_t j = 0; j < K; ++j) {
    EXPECT_EQ(weights[j], scores[experts[j]]) << "row 0 slot " << j;
    EXPECT_EQ(weights[K + j], scores[E + experts[K + j]]) << "row 1 slot " << j;
  }
  EXPECT_FLOAT_EQ(weights[0], 0.2f);
}

// The loss the backward is checked against, in double, for fixed choices: Σ dweights·weights +
// Σ_n Σ_e expert_dscores[e]·scores[n,e] + z_grad·Σ_n lse_n².
double reference_route_loss(const std::vector<double>& logits, const std::vector<int32_t>& experts,
                            const std::vector<float>& dweights, const std::vector<float>& expert_dscores, float z_grad,
                            const RouteCase& c) {
  double loss = 0;
  for (int64_t n = 0; n < c.N; ++n) {
    const double* l = logits.data() + n * c.E;
    const auto s = reference_scores(l, c.E, c.flags & KEEL_ROUTE_SIGMOID);
    const auto w = reference_weights(s, experts.data() + n * c.K, c.K, c.flags & KEEL_ROUTE_NORMALIZE);
    for (int32_t j = 0; j < c.K; ++j) loss += dweights[n * c.K + j] * w[j];
    for (int32_t e = 0; e < c.E && !expert_dscores.empty(); ++e) loss += expert_dscores[e] * s[e];
    const double max = *std::max_element(l, l + c.E);
    double sum = 0;
    for (int32_t e = 0; e < c.E; ++e) sum += std::exp(l[e] - max);
    const double lse = max + std::log(sum);
    loss += z_grad * lse * lse;
  }
  return loss;
}

TEST_F(BackendCpuMoe, RouteBackwardMatchesFiniteDifferences) {
  for (const RouteCase c : {RouteCase{6, 7, 2, 0}, RouteCase{6, 7, 2, KEEL_ROUTE_NORMALIZE}, RouteCase{5, 6, 3, KEEL_ROUTE_SIGMOID},
                            RouteCase{5, 6, 3, KEEL_ROUTE_SIGMOID | KEEL_ROUTE_NORMALIZE}}) {
    for (const bool extras : {false, true}) {
      const std::string what = "flags " + std::to_string(c.flags) +
                               (extras ? " with expert_dscores and z_grad 0.3" : " from dweights alone");
      const auto logits = random_floats(c.N * c.E, 21 + c.flags, -2, 2);
      const auto dweights = random_floats(c.N * c.K, 22);
      const auto expert_dscores = extras ? random_floats(c.E, 23) : std::vector<float>();
      const float z_grad = extras ? 0.3f : 0.0f;
      std::vector<float> weights(c.N * c.K), scores(c.N * c.E);
      std::vector<int32_t> experts(c.N * c.K);
      ASSERT_OK(api()->moe_route(h(), weights.data(), experts.data(), scores.data(), logits.data(), nullptr, c.N, c.E,
                                 c.K, c.flags));
      std::vector<float> dlogits(c.N * c.E, 7.0f);  // overwritten, not added to
      ASSERT_OK(api()->moe_route_backward(h(), dlogits.data(), dweights.data(), logits.data(), scores.data(),
                                          experts.data(), extras ? expert_dscores.data() : nullptr, z_grad, c.N, c.E,
                                          c.K, c.flags));
      auto x = to_double(logits);
      const auto want = numerical_gradient(
          x, [&] { return reference_route_loss(x, experts, dweights, expert_dscores, z_grad, c); });
      expect_close(dlogits, want, 2e-5, 1e-4, what + ": dlogits");
    }
  }
}

TEST_F(BackendCpuMoe, NormalisingChosenScoresThatSumToZeroLeavesZeroWeightsNotNaN) {
  // Sigmoid row 0: every logit -100, whose sigmoid underflows to 0 in fp32. Softmax row 0: a
  // selection bias of -10 passes over expert 0 (score 1) for 1 (exp(-200) underflows to 0).
  // Row 1 of each is ordinary and must equal its own one-row route, bit for bit.
  struct ZeroCase {
    int32_t flags;
    std::vector<float> logits, bias;
    int32_t K;
  };
  const int32_t E = 3;
  const std::vector<ZeroCase> cases = {
      {KEEL_ROUTE_SIGMOID | KEEL_ROUTE_NORMALIZE, {-100, -100, -100, 0.5f, -0.3f, 1}, {}, 2},
      {KEEL_ROUTE_NORMALIZE, {0, -200, -200, 0.5f, -0.3f, 1}, {-10, 0, 0}, 1}};
  for (const ZeroCase& c : cases) {
    const std::string what = "flags " + std::to_string(c.flags) + " K " + std::to_string(c.K);
    const float* bias = c.bias.empty() ? nullptr : c.bias.data();
    std::vector<float> weights(2 * c.K), scores(2 * E), dlogits(2 * E);
    std::vector<int32_t> experts(2 * c.K);
    ASSERT_OK(api()->moe_route(h(), weights.data(), experts.data(), scores.data(), c.logits.data(), bias, 2, E, c.K,
                               c.flags));
    for (int32_t j = 0; j < c.K; ++j) {
      EXPECT_EQ(scores[experts[j]], 0.0f) << what << ": row 0 chose an expert of score 0";
      EXPECT_EQ(weights[j], 0.0f) << what << ": row 0 slot " << j;
    }
    const std::vector<float> dweights(2 * c.K, 1.5f);
    ASSERT_OK(api()->moe_route_backward(h(), dlogits.data(), dweights.data(), c.logits.data(), scores.data(),
                                        experts.data(), nullptr, 0.0f, 2, E, c.K, c.flags));
    for (int32_t e = 0; e < E; ++e) EXPECT_EQ(dlogits[e], 0.0f) << what << ": row 0 dlogits[" << e << "]";
    std::vector<float> weights1(c.K), scores1(E), dlogits1(E);
    std::vector<int32_t> experts1(c.K);
    ASSERT_OK(api()->moe_route(h(), weights1.data(), experts1.data(), scores1.data(), c.logits.data() + E, bias, 1, E,
                               c.K, c.flags));
    ASSERT_OK(api()->moe_route_backward(h(), dlogits1.data(), dweights.data(), c.logits.data() + E, scores1.data(),
                                        experts1.data(), nullptr, 0.0f, 1, E, c.K, c.flags));
    EXPECT_EQ(std::vector<float>(weights.begin() + c.K, weights.end()), weights1) << what << ": row 1 weights";
    EXPECT_EQ(std::vector<float>(dlogits.begin() + E, dlogits.end()), dlogits1) << what << ": row 1 dlogits";
    float sum = 0;
    for (float w : weights1) sum += w;
    EXPECT_NEAR(sum, 1.0f, 1e-6f) << what << ": row 1 normalised";
  }
}

// --- the plan and the moves ------------------------------------------------------------------

// Positions by a stable sort of the pairs (n, j) by expert, and the count per expert.
void reference_plan(const std::vector<int32_t>& experts, int32_t E, std::vector<int32_t>& positions,
                    std::vector<int64_t>& counts) {
  std::vector<int32_t> pairs(experts.size());
  std::iota(pairs.begin(), pairs.end(), 0);
  std::stable_sort(pairs.begin(), pairs.end(), [&](int32_t a, int32_t b) { return experts[a] < experts[b]; });
  positions.assign(experts.size(), -1);
  for (size_t row = 0; row < pairs.size(); ++row) positions[pairs[row]] = int32_t(row);
  counts.assign(E, 0);
  for (int32_t e : experts) ++counts[e];
}

TEST_F(BackendCpuMoe, PlanPutsThePairsInExpertOrderWithAnExpertThatGetsNone) {
  const int64_t N = 5;
  const int32_t E = 4, K = 2;
  const std::vector<int32_t> experts = {3, 0, 1, 3, 0, 1, 3, 1, 0, 3};  // expert 2 gets no token
  std::vector<int32_t> positions(N * K, -1);
  std::vector<int64_t> counts(E, -1);
  ASSERT_OK(api()->moe_permute_plan(h(), positions.data(), counts.data(), experts.data(), N, E, K));
  EXPECT_EQ(counts, (std::vector<int64_t>{3, 3, 0, 4}));
  // Expert 0's pairs (0,1) (2,0) (4,0) take rows 0-2; expert 1's (1,0) (2,1) (3,1) rows 3-5;
  // expert 3's (0,0) (1,1) (3,0) (4,1) rows 6-9.
  EXPECT_EQ(positions, (std::vector<int32_t>{6, 0, 3, 7, 1, 4, 8, 5, 2, 9}));
  std::vector<int32_t> want_positions;
  std::vector<int64_t> want_counts;
  reference_plan(experts, E, want_positions, want_counts);
  EXPECT_EQ(positions, want_positions);
  EXPECT_EQ(counts, want_counts);
}

TEST_F(BackendCpuMoe, APlanWithoutItsHostCountsIsRefused) {
  // counts_host is the plan's host output; the cuda backend refuses a NULL one, so the cpu must
  // too (it used to write through it).
  const std::vector<int32_t> experts = {0, 1, 1, 2};
  std::vector<int32_t> positions(4, -1);
  EXPECT_EQ(api()->moe_permute_plan(h(), positions.data(), nullptr, experts.data(), 2, 3, 2),
            KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("moe_permute_plan: counts_host is NULL"), std::string::npos) << g_last_error;
  EXPECT_EQ(positions, std::vector<int32_t>(4, -1)) << "nothing written";
}

TEST_F(BackendCpuMoe, AnExpertIndexOutOfRangeIsRefused) {
  const int32_t E = 4, K = 2;
  std::vector<int32_t> positions(4), experts = {0, 1, 4, 2};
  std::vector<int64_t> counts(E);
  EXPECT_EQ(api()->moe_permute_plan(h(), positions.data(), counts.data(), experts.data(), 2, E, K),
            KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("moe_permute_plan: experts[1,0] = 4 is outside [0, E = 4)"), std::string::npos)
      << g_last_error;
  experts = {0, -1, 1, 2};
  EXPECT_EQ(api()->moe_permute_plan(h(), positions.data(), counts.data(), experts.data(), 2, E, K),
            KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("experts[0,1] = -1"), std::string::npos) << g_last_error;
  const std::vector<float> logits(2 * E), dweights(2 * K);
  std::vector<float> dlogits(2 * E), scores(2 * E), weights(2 * K);
  EXPECT_EQ(api()->moe_route_backward(h(), dlogits.data(), dweights.data(), logits.data(), scores.data(),
                                      experts.data(), nullptr, 0.0f, 2, E, K, 0),
            KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("moe_route_backward: experts[0,1] = -1"), std::string::npos) << g_last_error;
  EXPECT_EQ(api()->moe_route(h(), weights.data(), experts.data(), scores.data(), logits.data(), nullptr, 2, E, 5, 0),
            KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("moe_route: K = 5 experts per token must lie in [1, E = 4]"), std::string::npos)
      << g_last_error;
  EXPECT_EQ(api()->moe_route(h(), weights.data(), experts.data(), scores.data(), logits.data(), nullptr, 2, E, K, 4),
            KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("flags 4"), std::string::npos) << g_last_error;
  std::vector<float> rows(2 * K * 3);
  positions = {0, 1, 2, 4};  // 4 rows: 4 is past them
  EXPECT_EQ(api()->moe_permute_dt(h(), kFp32, rows.data(), rows.data(), nullptr, positions.data(), 2, K, 3),
            KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("moe_permute_dt: positions[1,1] = 4 is outside the 4 rows"), std::string::npos)
      << g_last_error;
}

TEST_F(BackendCpuMoe, AHostileTokenCountIsRefusedBeforeAnyProductOverflows) {
  // N*K and N*K*C are formed from the caller's numbers: a huge N must be refused by the bound, not
  // wrap into a small or negative row count that the loops then trust.
  std::vector<int32_t> positions = {0, 1};
  std::vector<float> rows(2 * 3);
  const int64_t hostile = int64_t(1) << 62;
  EXPECT_EQ(api()->moe_permute_dt(h(), kFp32, rows.data(), rows.data(), nullptr, positions.data(), hostile, 2, 3),
            KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("moe_permute_dt: N = 4611686018427387904 tokens of K = 2 pairs each do not fit the "
                              "int32 positions"),
            std::string::npos)
      << g_last_error;
  EXPECT_EQ(api()->moe_unpermute_dt(h(), kFp32, rows.data(), rows.data(), nullptr, positions.data(), 1, 2,
                                    int64_t(1) << 40),
            KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("moe_unpermute_dt: C = 1099511627776 columns is past 2^32"), std::string::npos)
      << g_last_error;
  std::vector<int64_t> counts(4);
  std::vector<int32_t> experts = {0, 1};
  EXPECT_EQ(api()->moe_permute_plan(h(), positions.data(), counts.data(), experts.data(), hostile, 4, 2),
            KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("do not fit the int32 positions"), std::string::npos) << g_last_error;
}

// A plan for random choices of K distinct experts per token.
struct Plan {
  std::vector<int32_t> experts, positions;
  std::vector<int64_t> counts;
};
Plan random_plan(int64_t N, int32_t E, int32_t K, uint32_t seed) {
  Plan p;
  std::mt19937 rng(seed);
  for (int64_t n = 0; n < N; ++n) {
    std::vector<int32_t> all(E);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    p.experts.insert(p.experts.end(), all.begin(), all.begin() + K);
  }
  reference_plan(p.experts, E, p.positions, p.counts);
  return p;
}

TEST_F(BackendCpuMoe, PermuteThenUnpermuteIsTheIdentity) {
  const int64_t N = 13, C = 10;
  const int32_t E = 5, K = 2;
  const Plan p = random_plan(N, E, K, 31);
  const auto x = random_floats(N * C, 32), scale = random_floats(N * K, 33, 0.1f, 1.0f);
  // Every permuted row is its token's row, scaled: exactly, and every row written.
  std::vector<float> rows(N * K * C, NAN);
  ASSERT_OK(api()->moe_permute_dt(h(), kFp32, rows.data(), x.data(), scale.data(), p.positions.data(), N, K, C));
  for (int64_t n = 0; n < N; ++n)
    for (int32_t j = 0; j < K; ++j)
      for (int64_t c = 0; c < C; ++c)
        ASSERT_EQ(rows[p.positions[n * K + j] * C + c], scale[n * K + j] * x[n * C + c]) << n << "," << j << "," << c;
  // Gathered back with the weights 1/K: the token's rows again.
  ASSERT_OK(api()->moe_permute_dt(h(), kFp32, rows.data(), x.data(), nullptr, p.positions.data(), N, K, C));
  const std::vector<float> half(N * K, 0.5f);
  std::vector<float> back(N * C, 9.0f);  // overwritten
  ASSERT_OK(api()->moe_unpermute_dt(h(), kFp32, back.data(), rows.data(), half.data(), p.positions.data(), N, K, C));
  EXPECT_EQ(back, x) << "permute then unpermute with weights 1/2 of K = 2";
  // The gradients: the backward of that round trip (permute dout with the weights, unpermute with
  // none) is the identity too.
  const auto dout = random_floats(N * C, 34);
  std::vector<float> drows(N * K * C), dx(N * C);
  ASSERT_OK(api()->moe_permute_dt(h(), kFp32, drows.data(), dout.data(), half.data(), p.positions.data(), N, K, C));
  ASSERT_OK(api()->moe_unpermute_dt(h(), kFp32, dx.data(), drows.data(), nullptr, p.positions.data(), N, K, C));
  EXPECT_EQ(dx, dout) << "the round trip's gradient";
}

TEST_F(BackendCpuMoe, UnpermuteSumsTheScaledRowsAndEachMoveIsTheOthersAdjoint) {
  const int64_t N = 11, C = 7;
  const int32_t E = 6, K = 3;
  const Plan p = random_plan(N, E, K, 41);
  const auto z = random_floats(N * K * C, 42), x = random_floats(N * C, 43), g = random_floats(N * C, 44);
  const auto scale = random_floats(N * K, 45);
  std::vector<float> out(N * C);
  ASSERT_OK(api()->moe_unpermute_dt(h(), kFp32, out.data(), z.data(), scale.data(), p.positions.data(), N, K, C));
  std::vector<double> want(N * C);  // fp32 sums of three terms: within their rounding of double's
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int32_t j = 0; j < K; ++j) want[n * C + c] += double(scale[n * K + j]) * z[p.positions[n * K + j] * C + c];
  expect_close(out, want, 1e-6, 1e-6, "unpermute out");
  // <unpermute(z, s), g> = <z, permute(g, s)>: permute is unpermute's input gradient.
  std::vector<float> pg(N * K * C);
  ASSERT_OK(api()->moe_permute_dt(h(), kFp32, pg.data(), g.data(), scale.data(), p.positions.data(), N, K, C));
  EXPECT_NEAR(dot(to_double(out), to_double(g)), dot(to_double(z), to_double(pg)), 1e-4);
  // <permute(x), z> = <x, unpermute(z)>: unpermute without a scale is permute's.
  std::vector<float> px(N * K * C), uz(N * C);
  ASSERT_OK(api()->moe_permute_dt(h(), kFp32, px.data(), x.data(), nullptr, p.positions.data(), N, K, C));
  ASSERT_OK(api()->moe_unpermute_dt(h(), kFp32, uz.data(), z.data(), nullptr, p.positions.data(), N, K, C));
  EXPECT_NEAR(dot(to_double(px), to_double(z)), dot(to_double(x), to_double(uz)), 1e-4);
}

TEST_F(BackendCpuMoe, UnpermuteScaleBackwardAccumulatesTheDotProducts) {
  const int64_t N = 9, C = 12;
  const int32_t E = 4, K = 2;
  const Plan p = random_plan(N, E, K, 51);
  const auto z = random_floats(N * K * C, 52), dout = random_floats(N * C, 53), initial = random_floats(N * K, 54);
  std::vector<float> dscale = initial;
  ASSERT_OK(api()->moe_unpermute_scale_backward_dt(h(), kFp32, dscale.data(), dout.data(), z.data(),
                                                   p.positions.data(), N, K, C));
  std::vector<double> want(N * K);
  for (int64_t n = 0; n < N; ++n)
    for (int32_t j = 0; j < K; ++j)
      for (int64_t c = 0; c < C; ++c) want[n * K + j] += double(dout[n * C + c]) * z[p.positions[n * K + j] * C + c];
  expect_close(dscale, plus(initial, want), 1e-6, 1e-6, "dscale");
}

TEST_F(BackendCpuMoe, MovesAtBf16RoundTheFp32ResultOnce) {
  const int64_t N = 10, C = 9;
  const int32_t E = 5, K = 2;
  const Plan p = random_plan(N, E, K, 61);
  const auto x = bf16_values(N * C, 62), z = bf16_values(N * K * C, 63), dout = bf16_values(N * C, 64);
  const auto scale = random_floats(N * K, 65);
  // Without a scale, permute moves bits.
  std::vector<uint16_t> rows16(N * K * C);
  ASSERT_OK(api()->moe_permute_dt(h(), kBf16, rows16.data(), x.h.data(), nullptr, p.positions.data(), N, K, C));
  for (int64_t n = 0; n < N; ++n)
    for (int32_t j = 0; j < K; ++j)
      ASSERT_EQ(0, std::memcmp(&rows16[p.positions[n * K + j] * C], &x.h[n * C], C * 2)) << n << "," << j;
  // With one, each op is the fp32 op's result rounded to the nearest bf16.
  std::vector<float> rows(N * K * C), out(N * C), dscale(N * K, 0.0f), dscale16(N * K, 0.0f);
  std::vector<uint16_t> out16(N * C);
  ASSERT_OK(api()->moe_permute_dt(h(), kFp32, rows.data(), x.f.data(), scale.data(), p.positions.data(), N, K, C));
  ASSERT_OK(api()->moe_permute_dt(h(), kBf16, rows16.data(), x.h.data(), scale.data(), p.positions.data(), N, K, C));
  for (size_t i = 0; i < rows.size(); ++i) ASSERT_EQ(rows16[i], nearest_bf16(rows[i])) << "permute row element " << i;
  ASSERT_OK(api()->moe_unpermute_dt(h(), kFp32, out.data(), z.f.data(), scale.data(), p.positions.data(), N, K, C));
  ASSERT_OK(api()->moe_unpermute_dt(h(), kBf16, out16.data(), z.h.data(), scale.data(), p.positions.data(), N, K, C));
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out16[i], nearest_bf16(out[i])) << "unpermute element " << i;
  // The scale's gradient is fp32 at either type, from the same numbers.
  ASSERT_OK(api()->moe_unpermute_scale_backward_dt(h(), kFp32, dscale.data(), dout.f.data(), z.f.data(),
                                                   p.positions.data(), N, K, C));
  ASSERT_OK(api()->moe_unpermute_scale_backward_dt(h(), kBf16, dscale16.data(), dout.h.data(), z.h.data(),
                                                   p.positions.data(), N, K, C));
  EXPECT_EQ(dscale16, dscale);
}

// --- the grouped matmul ----------------------------------------------------------------------

// Each group's rows as a separate matmul_*_dt call, against one grouped call: equal bits. Group
// 1 has no rows (and no weight); group 0 is big enough for the product to be split over two threads.
template <typename T>
void expect_grouped_equals_per_expert(void* h, keel_dtype dt, const std::vector<T>& inp, const std::vector<T>& dout,
                                      const std::vector<std::vector<T>>& weights, const std::vector<int64_t>& counts,
                                      int64_t IC, int64_t OC, T one, const std::string& what) {
  const int32_t E = int32_t(counts.size());
  const int64_t M = std::accumulate(counts.begin(), counts.end(), int64_t(0));
  std::vector<const void*> w(E);
  for (int32_t e = 0; e < E; ++e) w[e] = counts[e] ? weights[e].data() : nullptr;
  std::vector<T> out(M * OC), want_out(M * OC);
  ASSERT_OK(api()->grouped_matmul_forward_dt(h, dt, out.data(), inp.data(), w.data(), counts.data(), E, IC, OC));
  std::vector<T> dinp(M * IC, one), want_dinp(M * IC, one);  // the backward adds to what is there
  std::vector<std::vector<float>> dweights(E, random_floats(OC * IC, 72)), want_dweights = dweights;
  std::vector<float*> dw(E);
  for (int32_t e = 0; e < E; ++e) dw[e] = dweights[e].data();
  ASSERT_OK(api()->grouped_matmul_backward_dt(h, dt, dinp.data(), dw.data(), dout.data(), inp.data(), w.data(),
                                              counts.data(), E, IC, OC));
  int64_t row = 0;
  for (int32_t e = 0; e < E; ++e) {
    if (counts[e] > 0) {
      ASSERT_OK(api()->matmul_forward_dt(h, dt, &want_out[row * OC], nullptr, &inp[row * IC], weights[e].data(), nullptr,
                                         counts[e], IC, OC));
      ASSERT_OK(api()->matmul_backward_dt(h, dt, &want_dinp[row * IC], want_dweights[e].data(), nullptr, &dout[row * OC],
                                          &inp[row * IC], weights[e].data(), counts[e], IC, OC));
    }
    row += counts[e];
  }
  EXPECT_EQ(0, std::memcmp(out.data(), want_out.data(), out.size() * sizeof(T))) << what << ": out";
  EXPECT_EQ(0, std::memcmp(dinp.data(), want_dinp.data(), dinp.size() * sizeof(T))) << what << ": dinp";
  for (int32_t e = 0; e < E; ++e) EXPECT_EQ(dweights[e], want_dweights[e]) << what << ": dweights[" << e << "]";
}

TEST_F(BackendCpuMoe, GroupedMatmulEqualsOneMatmulPerExpert) {
  const int64_t IC = 96, OC = 176;
  const std::vector<int64_t> counts = {130, 0, 7, 33};  // 130·96·176 > 2·2^20 multiply-adds: two blocks
  const int64_t M = 170;
  {
    std::vector<std::vector<float>> weights;
    for (uint32_t e = 0; e < counts.size(); ++e) weights.push_back(random_floats(OC * IC, 80 + e));
    expect_grouped_equals_per_expert(h(), kFp32, random_floats(M * IC, 90), random_floats(M * OC, 91), weights, counts,
                                     IC, OC, 1.0f, "fp32");
  }
  std::vector<std::vector<uint16_t>> weights;
  for (uint32_t e = 0; e < counts.size(); ++e) weights.push_back(bf16_values(OC * IC, 80 + e).h);
  expect_grouped_equals_per_expert(h(), kBf16, bf16_values(M * IC, 90).h, bf16_values(M * OC, 91).h, weights, counts,
                                   IC, OC, uint16_t{0x3f80}, "bf16");  // 0x3f80: bf16 1.0
}

TEST_F(BackendCpuMoe, GroupedMatmulForwardAgreesWithADoubleProduct) {
  const int64_t IC = 5, OC = 3;
  const std::vector<int64_t> counts = {2, 0, 3};
  const auto inp = random_floats(5 * IC, 101), w0 = random_floats(OC * IC, 102), w2 = random_floats(OC * IC, 103);
  const std::vector<const void*> weights = {w0.data(), nullptr, w2.data()};
  std::vector<float> out(5 * OC);
  ASSERT_OK(api()->grouped_matmul_forward_dt(h(), kFp32, out.data(), inp.data(), weights.data(), counts.data(), 3, IC, OC));
  std::vector<double> want(5 * OC);
  for (int64_t m = 0; m < 5; ++m) {
    const float* w = m < 2 ? w0.data() : w2.data();
    for (int64_t o = 0; o < OC; ++o)
      for (int64_t i = 0; i < IC; ++i) want[m * OC + o] += double(inp[m * IC + i]) * w[o * IC + i];
  }
  expect_close(out, want, 1e-6, 1e-6, "grouped out");
  // A group with rows but no weight is refused, naming it.
  const std::vector<int64_t> bad_counts = {2, 1, 2};
  EXPECT_EQ(api()->grouped_matmul_forward_dt(h(), kFp32, out.data(), inp.data(), weights.data(), bad_counts.data(), 3,
                                             IC, OC),
            KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("grouped_matmul_forward_dt: weights[1] is NULL but 1 rows need it"), std::string::npos)
      << g_last_error;
}

}  // namespace
