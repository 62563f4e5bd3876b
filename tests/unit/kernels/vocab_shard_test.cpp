// The vocabulary-sharded kernels (ABI 0.6) against their definitions: each shard's embedding
// rows against a double loop, the shards' sum against the whole-table embedding, and the
// cross-entropy shards combined over 2, 3, 4 and 6 column blocks (one of which holds only
// padding) against crossentropy_forward/backward on the whole row. The combination is the one a
// tensor-parallel model does: M = max m_r, S = Σ s_r·e^(m_r−M), lse = M + log S.
#include "cpu/crossentropy.h"
#include "cpu/embedding.h"
#include "cpu/vocab_shard.h"

#include <algorithm>
#include <limits>

#include "reference.h"

using namespace keel_test;

namespace {

std::vector<int32_t> some_tokens(int64_t count, int64_t V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> tokens(count);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % V);
  tokens[0] = tokens[count - 1] = 3;  // a repeated token
  return tokens;
}

class EmbeddingRows : public ::testing::TestWithParam<int64_t> {};  // parameter: B·T·C large enough for threads?

TEST_P(EmbeddingRows, EveryShardMatchesReferenceAndShardsSumToTheWholeTable) {
  const int64_t B = 2, T = GetParam(), C = 40, Vp = 12, shards = 3, rows = Vp / shards;
  auto tokens = some_tokens(B * T, Vp, 1);
  auto wte = random_floats(Vp * C, 2), wpe = random_floats(T * C, 3), dout = random_floats(B * T * C, 4);
  std::vector<double> sum(B * T * C, 0.0);
  std::vector<float> whole_dwte(Vp * C, 0.0f);
  for (int64_t r = 0; r < shards; ++r) {
    const int64_t begin = r * rows;
    const float* wpe_here = r == 0 ? wpe.data() : nullptr;  // position embedding on one shard only
    std::vector<float> out(B * T * C, 7.0f);
    keel::cpu::embedding_rows_forward(out.data(), tokens.data(), wte.data() + begin * C, wpe_here, B, T, C, begin,
                                      rows);
    std::vector<double> want(B * T * C, 0.0), want_dwte(rows * C, 0.0), want_dwpe(T * C, 0.0);
    for (int64_t bt = 0; bt < B * T; ++bt)
      for (int64_t i = 0; i < C; ++i) {
        const int64_t tok = tokens[bt], t = bt % T;
        const bool mine = tok >= begin && tok < begin + rows;
        want[bt * C + i] = (mine ? double(wte[tok * C + i]) : 0.0) + (wpe_here ? wpe[t * C + i] : 0.0);
        if (mine) want_dwte[(tok - begin) * C + i] += dout[bt * C + i];
        want_dwpe[t * C + i] += dout[bt * C + i];
      }
    expect_close(out, want, 0, 1e-7, "out of shard " + std::to_string(r));
    for (size_t k = 0; k < sum.size(); ++k) sum[k] += out[k];

    auto dwte = random_floats(rows * C, 5), dwpe = random_floats(T * C, 6);
    auto got_dwte = dwte, got_dwpe = dwpe;
    keel::cpu::embedding_rows_backward(got_dwte.data(), got_dwpe.data(), dout.data(), tokens.data(), B, T, C, begin,
                                       rows);
    expect_close(got_dwte, plus(dwte, want_dwte), 1e-5, 1e-5, "dwte_rows of shard " + std::to_string(r));
    expect_close(got_dwpe, plus(dwpe, want_dwpe), 1e-5, 1e-5, "dwpe of shard " + std::to_string(r));
    std::vector<float> untouched = dwte;  // dwpe NULL: only the rows
    keel::cpu::embedding_rows_backward(untouched.data(), nullptr, dout.data(), tokens.data(), B, T, C, begin, rows);
    expect_close(untouched, plus(dwte, want_dwte), 1e-5, 1e-5, "dwte_rows without dwpe");
    std::copy(got_dwte.begin(), got_dwte.end(), whole_dwte.begin() + begin * C);
    for (int64_t k = 0; k < rows * C; ++k) whole_dwte[begin * C + k] -= dwte[k];
  }
  std::vector<float> whole(B * T * C);
  keel::cpu::embedding_forward(whole.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  expect_close(whole, sum, 1e-6, 1e-6, "Σ shards vs embedding_forward");
  std::vector<float> want_whole_dwte(Vp * C, 0.0f);
  keel::cpu::embedding_backward(want_whole_dwte.data(), nullptr, dout.data(), tokens.data(), B, T, C);
  expect_close(whole_dwte, to_double(want_whole_dwte), 1e-5, 1e-5, "shards' dwte vs embedding_backward");
}

INSTANTIATE_TEST_SUITE_P(Sizes, EmbeddingRows, ::testing::Values(int64_t{5}, int64_t{500}));

// V = 37 real columns of Vp = 48; 6 shards of 8 leave the last one all padding.
constexpr int64_t N = 7, V = 37, Vp = 48;
const std::vector<int32_t> kTargets = {5, -1, 0, 36, 40 - 4, -100, 12};

class CrossentropyShards : public ::testing::TestWithParam<int64_t> {};

TEST_P(CrossentropyShards, CombinedStatsAndBackwardEqualTheWholeRow) {
  const int64_t shards = GetParam(), cols = Vp / shards;
  auto logits = random_floats(N * Vp, 1, -4.0f, 4.0f);
  std::vector<std::vector<float>> stats(shards, std::vector<float>(N * 3, 9.0f));
  std::vector<std::vector<float>> pieces(shards);
  for (int64_t r = 0; r < shards; ++r) {
    const int64_t begin = r * cols, valid = std::clamp<int64_t>(V - begin, 0, cols);
    pieces[r].resize(N * cols);
    for (int64_t n = 0; n < N; ++n)
      std::copy(logits.begin() + n * Vp + begin, logits.begin() + n * Vp + begin + cols, pieces[r].begin() + n * cols);
    keel::cpu::crossentropy_shard_stats(stats[r].data(), pieces[r].data(), kTargets.data(), N, begin, valid, cols);
    if (valid == 0)
      for (int64_t n = 0; n < N; ++n) {
        EXPECT_EQ(stats[r][n * 3], -std::numeric_limits<float>::infinity()) << "max of an all-padding shard";
        EXPECT_EQ(stats[r][n * 3 + 1], 0.0f) << "sum of an all-padding shard";
      }
  }
  std::vector<float> lse(N);
  std::vector<double> losses(N);
  for (int64_t n = 0; n < N; ++n) {
    double M = -std::numeric_limits<double>::infinity(), S = 0, target_logit = 0;
    for (int64_t r = 0; r < shards; ++r) M = std::max<double>(M, stats[r][n * 3]);
    for (int64_t r = 0; r < shards; ++r) {
      S += stats[r][n * 3 + 1] * std::exp(stats[r][n * 3] - M);
      target_logit += stats[r][n * 3 + 2];
    }
    lse[n] = static_cast<float>(M + std::log(S));
    losses[n] = kTargets[n] >= 0 ? M + std::log(S) - target_logit : 0.0;
  }
  std::vector<float> want_losses(N), probs(N * Vp);
  keel::cpu::crossentropy_forward(want_losses.data(), probs.data(), logits.data(), kTargets.data(), N, V, Vp);
  expect_close(std::vector<float>(losses.begin(), losses.end()), to_double(want_losses), 1e-6, 1e-6, "losses");

  const float dloss = 1.0f / 5;
  auto initial = random_floats(N * Vp, 2);
  std::vector<float> want = initial, got = initial;
  keel::cpu::crossentropy_backward(want.data(), probs.data(), kTargets.data(), dloss, N, V, Vp);
  for (int64_t r = 0; r < shards; ++r) {
    const int64_t begin = r * cols, valid = std::clamp<int64_t>(V - begin, 0, cols);
    std::vector<float> d(N * cols);
    for (int64_t n = 0; n < N; ++n)
      std::copy(initial.begin() + n * Vp + begin, initial.begin() + n * Vp + begin + cols, d.begin() + n * cols);
    keel::cpu::crossentropy_shard_backward(d.data(), pieces[r].data(), lse.data(), kTargets.data(), dloss, N, begin,
                                           valid, cols);
    for (int64_t n = 0; n < N; ++n)
      std::copy(d.begin() + n * cols, d.begin() + (n + 1) * cols, got.begin() + n * Vp + begin);
  }
  expect_close(got, to_double(want), 1e-6, 1e-6, "dlogits");
}

INSTANTIATE_TEST_SUITE_P(Shards, CrossentropyShards, ::testing::Values(int64_t{1}, int64_t{2}, int64_t{3},
                                                                         int64_t{4}, int64_t{6}));

}  // namespace
