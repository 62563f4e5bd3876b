// matmul_forward/backward against triple loops in double, and the backward against finite
// differences of that reference. Gradient buffers start non-zero to check accumulation (+=).
#include "cpu/matmul.h"

#include "reference.h"

using namespace keel_test;

namespace {

// out(N,OC) = inp(N,IC) · weight(OC,IC)ᵀ + bias(OC)
std::vector<double> matmul_ref(const std::vector<double>& inp, const std::vector<double>& weight,
                               const std::vector<double>* bias, int64_t N, int64_t IC, int64_t OC) {
  std::vector<double> out(N * OC);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) {
      double s = bias ? (*bias)[o] : 0.0;
      for (int64_t i = 0; i < IC; ++i) s += inp[n * IC + i] * weight[o * IC + i];
      out[n * OC + o] = s;
    }
  return out;
}

struct Case {
  int64_t N, IC, OC;
};
void PrintTo(const Case& c, std::ostream* os) { *os << "N=" << c.N << ",IC=" << c.IC << ",OC=" << c.OC; }

class Matmul : public ::testing::TestWithParam<Case> {};

TEST_P(Matmul, ForwardWithAndWithoutBias) {
  const auto [N, IC, OC] = GetParam();
  auto inp = random_floats(N * IC, 1), weight = random_floats(OC * IC, 2), bias = random_floats(OC, 3);
  auto dbias = to_double(bias);
  std::vector<float> out(N * OC, 7.0f);  // garbage: forward overwrites
  keel::cpu::matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), N, IC, OC);
  expect_close(out, matmul_ref(to_double(inp), to_double(weight), &dbias, N, IC, OC), 1e-5, 1e-5, "out (bias)");
  std::fill(out.begin(), out.end(), 7.0f);
  keel::cpu::matmul_forward(out.data(), inp.data(), weight.data(), nullptr, N, IC, OC);
  expect_close(out, matmul_ref(to_double(inp), to_double(weight), nullptr, N, IC, OC), 1e-5, 1e-5, "out (no bias)");
}

TEST_P(Matmul, BackwardAccumulatesNaiveGradients) {
  const auto [N, IC, OC] = GetParam();
  auto inp = random_floats(N * IC, 4), weight = random_floats(OC * IC, 5), dout = random_floats(N * OC, 6);
  auto dinp = random_floats(N * IC, 7), dweight = random_floats(OC * IC, 8), dbias = random_floats(OC, 9);
  std::vector<double> want_dinp(N * IC), want_dweight(OC * IC), want_dbias(OC);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) {
      const double g = dout[n * OC + o];
      want_dbias[o] += g;
      for (int64_t i = 0; i < IC; ++i) {
        want_dinp[n * IC + i] += g * weight[o * IC + i];
        want_dweight[o * IC + i] += g * inp[n * IC + i];
      }
    }
  auto got_dinp = dinp, got_dweight = dweight, got_dbias = dbias;
  keel::cpu::matmul_backward(got_dinp.data(), got_dweight.data(), got_dbias.data(), dout.data(), inp.data(),
                             weight.data(), N, IC, OC);
  expect_close(got_dinp, plus(dinp, want_dinp), 1e-5, 1e-5, "dinp");
  expect_close(got_dweight, plus(dweight, want_dweight), 1e-4, 1e-5, "dweight");  // sums over N rows
  expect_close(got_dbias, plus(dbias, want_dbias), 1e-4, 1e-5, "dbias");

  // NULL outputs are skipped, and the others are still computed.
  got_dweight = dweight;
  keel::cpu::matmul_backward(nullptr, got_dweight.data(), nullptr, dout.data(), inp.data(), weight.data(), N, IC, OC);
  expect_close(got_dweight, plus(dweight, want_dweight), 1e-4, 1e-5, "dweight (dinp, dbias NULL)");
  got_dinp = dinp;
  keel::cpu::matmul_backward(got_dinp.data(), nullptr, nullptr, dout.data(), inp.data(), weight.data(), N, IC, OC);
  expect_close(got_dinp, plus(dinp, want_dinp), 1e-5, 1e-5, "dinp (dweight, dbias NULL)");
  got_dbias = dbias;
  keel::cpu::matmul_backward(nullptr, nullptr, got_dbias.data(), dout.data(), inp.data(), weight.data(), N, IC, OC);
  expect_close(got_dbias, plus(dbias, want_dbias), 1e-4, 1e-5, "dbias (dinp, dweight NULL)");
}

// Odd sizes, and one large enough to take the threaded bias-gradient path.
INSTANTIATE_TEST_SUITE_P(Sizes, Matmul, ::testing::Values(Case{7, 13, 11}, Case{1, 5, 3}, Case{300, 45, 130}));

TEST(MatmulFiniteDifferences, BackwardMatchesNumericalGradient) {
  const int64_t N = 5, IC = 7, OC = 3;
  auto inp = random_floats(N * IC, 10), weight = random_floats(OC * IC, 11), bias = random_floats(OC, 12);
  auto dout = random_floats(N * OC, 13);
  std::vector<float> dinp(N * IC), dweight(OC * IC), dbias(OC);
  keel::cpu::matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(),
                             N, IC, OC);
  auto x = to_double(inp), w = to_double(weight), b = to_double(bias), g = to_double(dout);
  auto loss = [&] { return dot(g, matmul_ref(x, w, &b, N, IC, OC)); };  // L = Σ dout ⊙ out
  // Float kernel against a double numerical gradient of O(1) values: 1e-5 is ~100 float ulps.
  expect_close(dinp, numerical_gradient(x, loss), 1e-5, 1e-5, "dinp vs finite differences");
  expect_close(dweight, numerical_gradient(w, loss), 1e-5, 1e-5, "dweight vs finite differences");
  expect_close(dbias, numerical_gradient(b, loss), 1e-5, 1e-5, "dbias vs finite differences");
}

}  // namespace
