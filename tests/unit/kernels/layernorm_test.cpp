// layernorm_forward/backward against a double reference; the backward reference goes through
// the explicit Jacobian of the normalisation (a different route from the kernel's closed form),
// and against finite differences.
#include "cpu/layernorm.h"

#include "reference.h"

using namespace keel_test;

namespace {

constexpr double kEps = 1e-5;

std::vector<double> layernorm_ref(const std::vector<double>& x, const std::vector<double>& w,
                                  const std::vector<double>& b, int64_t N, int64_t C,
                                  std::vector<double>* mean = nullptr, std::vector<double>* rstd = nullptr) {
  std::vector<double> out(N * C);
  for (int64_t n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < C; ++i) m += x[n * C + i];
    m /= C;
    for (int64_t i = 0; i < C; ++i) v += (x[n * C + i] - m) * (x[n * C + i] - m);
    const double s = 1.0 / std::sqrt(v / C + kEps);
    for (int64_t i = 0; i < C; ++i) out[n * C + i] = (x[n * C + i] - m) * s * w[i] + b[i];
    if (mean) (*mean)[n] = m;
    if (rstd) (*rstd)[n] = s;
  }
  return out;
}

struct Case {
  int64_t N, C;
};
void PrintTo(const Case& c, std::ostream* os) { *os << "N=" << c.N << ",C=" << c.C; }
class Layernorm : public ::testing::TestWithParam<Case> {};

TEST_P(Layernorm, ForwardAndBackwardMatchReference) {
  const auto [N, C] = GetParam();
  auto inp = random_floats(N * C, 1, -2.0f, 3.0f), weight = random_floats(C, 2), bias = random_floats(C, 3);
  auto dout = random_floats(N * C, 4);
  std::vector<float> out(N * C), mean(N), rstd(N);
  keel::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);
  std::vector<double> want_mean(N), want_rstd(N);
  auto x = to_double(inp), w = to_double(weight), b = to_double(bias), g = to_double(dout);
  expect_close(out, layernorm_ref(x, w, b, N, C, &want_mean, &want_rstd), 1e-5, 1e-5, "out");
  expect_close(mean, want_mean, 1e-6, 1e-5, "mean");
  expect_close(rstd, want_rstd, 1e-6, 1e-5, "rstd");

  // Reference backward: dx_j = Σ_i dnorm_i ∂norm_i/∂x_j, ∂norm_i/∂x_j = s(δ_ij − 1/C) − s·norm_i·norm_j/C.
  std::vector<double> want_dx(N * C), want_dw(C), want_db(C);
  for (int64_t n = 0; n < N; ++n) {
    const double m = want_mean[n], s = want_rstd[n];
    for (int64_t j = 0; j < C; ++j) {
      const double norm_j = (x[n * C + j] - m) * s;
      double dx = 0;
      for (int64_t i = 0; i < C; ++i) {
        const double norm_i = (x[n * C + i] - m) * s;
        dx += g[n * C + i] * w[i] * (s * ((i == j) - 1.0 / C) - s * norm_i * norm_j / C);
      }
      want_dx[n * C + j] = dx;
      want_dw[j] += g[n * C + j] * norm_j;
      want_db[j] += g[n * C + j];
    }
  }
  auto dinp = random_floats(N * C, 5), dweight = random_floats(C, 6), dbias = random_floats(C, 7);
  auto got_dinp = dinp, got_dweight = dweight, got_dbias = dbias;
  keel::cpu::layernorm_backward(got_dinp.data(), got_dweight.data(), got_dbias.data(), dout.data(), inp.data(),
                                weight.data(), mean.data(), rstd.data(), N, C);
  expect_close(got_dinp, plus(dinp, want_dx), 1e-4, 1e-4, "dinp");
  expect_close(got_dweight, plus(dweight, want_dw), 1e-4, 1e-4, "dweight");
  expect_close(got_dbias, plus(dbias, want_db), 1e-4, 1e-4, "dbias");
}

// Odd sizes, and one above the threading threshold (per-thread partial dweight/dbias).
INSTANTIATE_TEST_SUITE_P(Sizes, Layernorm, ::testing::Values(Case{7, 13}, Case{1, 1}, Case{2001, 37}));

TEST(LayernormFiniteDifferences, BackwardMatchesNumericalGradient) {
  const int64_t N = 3, C = 5;
  auto inp = random_floats(N * C, 8, -2.0f, 2.0f), weight = random_floats(C, 9), bias = random_floats(C, 10);
  auto dout = random_floats(N * C, 11);
  std::vector<float> out(N * C), mean(N), rstd(N), dinp(N * C), dweight(C), dbias(C);
  keel::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);
  keel::cpu::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(),
                                mean.data(), rstd.data(), N, C);
  auto x = to_double(inp), w = to_double(weight), b = to_double(bias), g = to_double(dout);
  auto loss = [&] { return dot(g, layernorm_ref(x, w, b, N, C)); };
  // rstd amplifies float rounding in dinp by up to ~1/std of the row: 1e-4 leaves a 10x margin.
  expect_close(dinp, numerical_gradient(x, loss), 1e-4, 1e-4, "dinp vs finite differences");
  expect_close(dweight, numerical_gradient(w, loss), 1e-5, 1e-5, "dweight vs finite differences");
  expect_close(dbias, numerical_gradient(b, loss), 1e-5, 1e-5, "dbias vs finite differences");
}

}  // namespace
