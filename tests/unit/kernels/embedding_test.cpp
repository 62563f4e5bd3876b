// Token + position embedding against loops in double; the backward with repeated tokens (the
// scatter must add every occurrence) at a small size and one large enough to use threads,
// and against finite differences.
#include "cpu/embedding.h"

#include "reference.h"

using namespace keel_test;

namespace {

struct Case {
  int64_t B, T, C, V;
};
void PrintTo(const Case& c, std::ostream* os) { *os << "B=" << c.B << ",T=" << c.T << ",C=" << c.C << ",V=" << c.V; }
class Embedding : public ::testing::TestWithParam<Case> {};

std::vector<int32_t> tokens_with_repeats(int64_t count, int64_t V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> tokens(count);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % V);
  tokens[0] = tokens[count - 1] = 3;  // at least one token certainly repeated
  return tokens;
}

TEST_P(Embedding, ForwardAndBackwardMatchReference) {
  const auto [B, T, C, V] = GetParam();
  auto tokens = tokens_with_repeats(B * T, V, 1);
  auto wte = random_floats(V * C, 2), wpe = random_floats(T * C, 3), dout = random_floats(B * T * C, 4);
  std::vector<float> out(B * T * C, 8.0f);
  keel::cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  std::vector<double> want(B * T * C), want_dwte(V * C, 0.0), want_dwpe(T * C, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < C; ++i) {
        const int64_t bt = b * T + t;
        want[bt * C + i] = double(wte[tokens[bt] * C + i]) + wpe[t * C + i];
        want_dwte[tokens[bt] * C + i] += dout[bt * C + i];
        want_dwpe[t * C + i] += dout[bt * C + i];
      }
  expect_close(out, want, 0, 1e-7, "out");
  auto dwte = random_floats(V * C, 5), dwpe = random_floats(T * C, 6);
  auto got_dwte = dwte, got_dwpe = dwpe;
  keel::cpu::embedding_backward(got_dwte.data(), got_dwpe.data(), dout.data(), tokens.data(), B, T, C);
  expect_close(got_dwte, plus(dwte, want_dwte), 1e-5, 1e-5, "dwte");
  expect_close(got_dwpe, plus(dwpe, want_dwpe), 1e-5, 1e-5, "dwpe");
}

INSTANTIATE_TEST_SUITE_P(Sizes, Embedding, ::testing::Values(Case{2, 5, 13, 7}, Case{4, 97, 130, 11}));

TEST(EmbeddingFiniteDifferences, BackwardMatchesNumericalGradient) {
  const int64_t B = 2, T = 3, C = 4, V = 5;
  const std::vector<int32_t> tokens = {1, 4, 1, 1, 0, 4};  // 1 three times, 4 twice, 2 and 3 never
  auto wte = random_floats(V * C, 7), wpe = random_floats(T * C, 8), dout = random_floats(B * T * C, 9);
  std::vector<float> dwte(V * C, 0.0f), dwpe(T * C, 0.0f);
  keel::cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  auto e = to_double(wte), p = to_double(wpe), g = to_double(dout);
  auto loss = [&] {
    double l = 0;
    for (int64_t bt = 0; bt < B * T; ++bt)
      for (int64_t i = 0; i < C; ++i) l += g[bt * C + i] * (e[tokens[bt] * C + i] + p[(bt % T) * C + i]);
    return l;
  };
  expect_close(dwte, numerical_gradient(e, loss), 1e-6, 1e-5, "dwte vs finite differences");
  expect_close(dwpe, numerical_gradient(p, loss), 1e-6, 1e-5, "dwpe vs finite differences");
}

}  // namespace
