// Causal attention against a per-(b, h, t) loop in double, the backward against that loop's
// chain rule and against finite differences, and a check that the future cannot leak into
// the past. T = 131 crosses the kernel's 64-row blocks (a partial last block included). Shapes
// with NKV < NH are grouped-query attention (NKV = 1: multi-query): the reference gives query
// head h its key/value head h / (NH/NKV).
#include "cpu/attention.h"

#include "reference.h"

using namespace keel_test;

namespace {

struct Shape {
  int64_t B, T, C, NH, NKV;
  int64_t hs() const { return C / NH; }
  int64_t row() const { return C + 2 * NKV * hs(); }  // q, then k and v
  int64_t kv(int64_t h) const { return h / (NH / NKV); }
};
void PrintTo(const Shape& s, std::ostream* os) {
  *os << "B=" << s.B << ",T=" << s.T << ",C=" << s.C << ",NH=" << s.NH << ",NKV=" << s.NKV;
}

// out(B,T,C) and probabilities p(B,NH,T,T) from qkv(B,T,row).
std::vector<double> attention_ref(const std::vector<double>& qkv, Shape s, std::vector<double>* probs = nullptr) {
  const int64_t hs = s.hs(), C3 = s.row(), KC = s.NKV * hs;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> out(s.B * s.T * s.C, 0.0), p(s.T);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.NH; ++h)
      for (int64_t t = 0; t < s.T; ++t) {
        const double* q = &qkv[(b * s.T + t) * C3 + h * hs];
        double max = -1e300, sum = 0;
        for (int64_t u = 0; u <= t; ++u) {
          const double* k = &qkv[(b * s.T + u) * C3 + s.C + s.kv(h) * hs];
          double d = 0;
          for (int64_t i = 0; i < hs; ++i) d += q[i] * k[i];
          p[u] = d * scale;
          max = std::max(max, p[u]);
        }
        for (int64_t u = 0; u <= t; ++u) sum += (p[u] = std::exp(p[u] - max));
        for (int64_t u = 0; u <= t; ++u) {
          p[u] /= sum;
          if (probs) (*probs)[((b * s.NH + h) * s.T + t) * s.T + u] = p[u];
          const double* v = &qkv[(b * s.T + u) * C3 + s.C + KC + s.kv(h) * hs];
          for (int64_t i = 0; i < hs; ++i) out[(b * s.T + t) * s.C + h * hs + i] += p[u] * v[i];
        }
      }
  return out;
}

// dqkv from dout through scores = scale·q·k, p = softmax(scores), out = p·v.
std::vector<double> attention_backward_ref(const std::vector<double>& qkv, const std::vector<double>& dout,
                                           const std::vector<double>& probs, Shape s) {
  const int64_t hs = s.hs(), C3 = s.row(), KC = s.NKV * hs;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> dqkv(qkv.size(), 0.0), dp(s.T);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.NH; ++h)
      for (int64_t t = 0; t < s.T; ++t) {
        const double* p = &probs[((b * s.NH + h) * s.T + t) * s.T];
        const double* g = &dout[(b * s.T + t) * s.C + h * hs];
        double p_dot_dp = 0;
        for (int64_t u = 0; u <= t; ++u) {
          const int64_t v_at = (b * s.T + u) * C3 + s.C + KC + s.kv(h) * hs;
          dp[u] = 0;
          for (int64_t i = 0; i < hs; ++i) {
            dp[u] += g[i] * qkv[v_at + i];
            dqkv[v_at + i] += p[u] * g[i];
          }
          p_dot_dp += p[u] * dp[u];
        }
        const int64_t q_at = (b * s.T + t) * C3 + h * hs;
        for (int64_t u = 0; u <= t; ++u) {
          const double dscore = p[u] * (dp[u] - p_dot_dp) * scale;
          const int64_t k_at = (b * s.T + u) * C3 + s.C + s.kv(h) * hs;
          for (int64_t i = 0; i < hs; ++i) {
            dqkv[q_at + i] += dscore * qkv[k_at + i];
            dqkv[k_at + i] += dscore * qkv[q_at + i];
          }
        }
      }
  return dqkv;
}

class Attention : public ::testing::TestWithParam<Shape> {};

TEST_P(Attention, ForwardAndBackwardMatchReference) {
  const Shape s = GetParam();
  auto qkv = random_floats(s.B * s.T * s.row(), 1, -2.0f, 2.0f), dout = random_floats(s.B * s.T * s.C, 2);
  ASSERT_EQ(keel::cpu::attention_saved_floats(s.B, s.T, s.C, s.NH), s.B * s.NH * s.T * s.T);
  std::vector<float> out(s.B * s.T * s.C, 5.0f), att(keel::cpu::attention_saved_floats(s.B, s.T, s.C, s.NH), 5.0f);
  keel::cpu::attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH, s.NKV);
  std::vector<double> probs(att.size(), 0.0);  // zero above the diagonal, as the kernel promises
  auto want = attention_ref(to_double(qkv), s, &probs);
  expect_close(out, want, 1e-5, 1e-4, "out");
  expect_close(att, probs, 1e-6, 1e-4, "saved probabilities");

  auto dqkv = random_floats(qkv.size(), 3), got = dqkv;
  keel::cpu::attention_backward(got.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.C, s.NH, s.NKV);
  expect_close(got, plus(dqkv, attention_backward_ref(to_double(qkv), to_double(dout), probs, s)), 1e-5, 1e-4,
               "dqkv");
}

INSTANTIATE_TEST_SUITE_P(Shapes, Attention,
                         ::testing::Values(Shape{2, 5, 9, 3, 3}, Shape{1, 1, 4, 2, 2}, Shape{2, 131, 6, 2, 2},
                                           Shape{3, 64, 8, 1, 1}, Shape{2, 9, 18, 6, 2}, Shape{2, 131, 12, 6, 3},
                                           Shape{1, 7, 12, 4, 1}));

TEST(AttentionCausality, FuturePositionsDoNotChangeEarlierOutputs) {
  const Shape s{2, 70, 12, 3, 3};
  const int64_t t0 = 40;  // outputs at t ≤ t0 must not depend on qkv at t > t0
  auto qkv = random_floats(s.B * s.T * s.row(), 4, -2.0f, 2.0f);
  auto changed = qkv;
  auto noise = random_floats(qkv.size(), 5, -3.0f, 3.0f);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = t0 + 1; t < s.T; ++t)
      for (int64_t i = 0; i < s.row(); ++i) changed[(b * s.T + t) * s.row() + i] += noise[(b * s.T + t) * s.row() + i];
  const int64_t saved = keel::cpu::attention_saved_floats(s.B, s.T, s.C, s.NH);
  std::vector<float> out1(s.B * s.T * s.C), out2(out1.size()), att1(saved), att2(saved);
  keel::cpu::attention_forward(out1.data(), att1.data(), qkv.data(), s.B, s.T, s.C, s.NH, s.NKV);
  keel::cpu::attention_forward(out2.data(), att2.data(), changed.data(), s.B, s.T, s.C, s.NH, s.NKV);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t i = 0; i < s.C; ++i) {
        const int64_t at = (b * s.T + t) * s.C + i;
        if (t <= t0)
          ASSERT_FLOAT_EQ(out1[at], out2[at]) << "future leaked into b=" << b << " t=" << t << " i=" << i;
        else
          ASSERT_NE(out1[at], out2[at]) << "the perturbation did not reach b=" << b << " t=" << t;
      }
}

TEST(AttentionFiniteDifferences, BackwardMatchesNumericalGradient) {
  for (const Shape s : {Shape{2, 4, 6, 2, 2}, Shape{2, 4, 12, 6, 2}}) {
    SCOPED_TRACE("NKV " + std::to_string(s.NKV));
    auto qkv = random_floats(s.B * s.T * s.row(), 6), dout = random_floats(s.B * s.T * s.C, 7);
    std::vector<float> out(s.B * s.T * s.C), att(keel::cpu::attention_saved_floats(s.B, s.T, s.C, s.NH));
    std::vector<float> dqkv(qkv.size(), 0.0f);
    keel::cpu::attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH, s.NKV);
    keel::cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.C, s.NH, s.NKV);
    auto x = to_double(qkv), g = to_double(dout);
    // Float kernel (exp with ~1e-7 relative error) against a double numerical gradient.
    expect_close(dqkv, numerical_gradient(x, [&] { return dot(g, attention_ref(x, s)); }), 2e-5, 1e-4,
                 "dqkv vs finite differences");
  }
}

}  // namespace

// Decoding with a key/value cache: the sequence's queries fed in pieces (a prompt of 37, then one
// position at a time) over the cache give the rows the reference gives the whole sequence, for
// multi-head and grouped-query layouts; a piece past the cache's capacity is refused.
TEST(AttentionDecode, PiecesOverTheCacheMatchTheWholeSequence) {
  for (const Shape s : {Shape{2, 70, 32, 4, 4}, Shape{2, 70, 32, 4, 2}}) {
    const int64_t capacity = 80, hs = s.hs(), row = s.row();
    auto qkv = random_floats(s.B * s.T * row, 8, -2.0f, 2.0f);
    const std::vector<double> want = attention_ref(to_double(qkv), s);
    std::vector<float> keys(s.B * s.NKV * capacity * hs), values(keys.size()), out(s.B * s.T * s.C);
    for (int64_t past = 0, n = 37; past < s.T; past += n, n = 1) {
      std::vector<float> piece(s.B * n * row), piece_out(s.B * n * s.C);
      for (int64_t b = 0; b < s.B; ++b)
        std::copy(qkv.begin() + (b * s.T + past) * row, qkv.begin() + (b * s.T + past + n) * row,
                  piece.begin() + b * n * row);
      keel::cpu::attention_decode(piece_out.data(), keys.data(), values.data(), piece.data(), s.B, n, s.C, s.NH, s.NKV,
                                  past, capacity);
      for (int64_t b = 0; b < s.B; ++b)
        std::copy(piece_out.begin() + b * n * s.C, piece_out.begin() + (b + 1) * n * s.C,
                  out.begin() + (b * s.T + past) * s.C);
    }
    expect_close(out, want, 1e-5, 1e-4, "decoded out");
    std::vector<float> one(s.B * row), one_out(s.B * s.C);
    EXPECT_THROW(keel::cpu::attention_decode(one_out.data(), keys.data(), values.data(), one.data(), s.B, 1, s.C, s.NH,
                                             s.NKV, capacity, capacity),
                 std::invalid_argument);
  }
}
