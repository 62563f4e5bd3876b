// The cpu backend's ops at an element type (ABI 0.8 *_dt) through its table. At fp32 every op
// must give the bits of the fp32 slot it forwards to. At bf16 every op must match the fp32 slot
// run on the same (bf16-representable) inputs, within what rounding the stored results to bf16
// allows: each rounding to nearest moves a value by at most 2^-8 of itself (bf16 keeps 8
// significant bits), plus 1e-6 of the output's scale for fp32 sums that may be added up in
// another order. Outputs the ABI keeps fp32 (weight gradients, mean, rstd, statistics) are held
// to that 1e-6 alone. Also: crossentropy_combine against the unsharded statistics and a naive
// loss, the in-place cross-entropy backward, and an element type the backend does not run.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend_plugin.h"
#include "bf16_reference.h"
#include "reference.h"

using namespace keel_test;

namespace {

constexpr keel_dtype kFp32{KEEL_DTYPE_FLOAT, 32, 1};
constexpr keel_dtype kBf16{KEEL_DTYPE_BFLOAT, 16, 1};
constexpr double kBf16Rounding = 1.0 / 256;  // 2^-8: one rounding to nearest, relative
constexpr double kSumOrder = 1e-6;           // fp32 sums in another order, relative to the output's scale

double scale_of(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s = std::max(s, double(std::fabs(x)));
  return s;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    if (float_bits(got[i]) != float_bits(want[i])) {
      ADD_FAILURE() << what << " at fp32 differs from the fp32 slot at [" << i << "]: " << got[i] << " vs " << want[i];
      return;
    }
}

// |got - want| <= rounds·2^-8·|want| + 1e-6·scale(want) everywhere.
void expect_within(const std::vector<float>& got, const std::vector<float>& want, double rounds,
                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double atol = kSumOrder * scale_of(want);
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(double(got[i]) - want[i]) <= rounds * kBf16Rounding * std::fabs(want[i]) + atol) && bad++ == 0)
      first = i;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " off; first [" << first << "]: got "
                     << got[first] << ", want " << want[first];
}

// A bf16 result that should be the fp32 result rounded once.
void expect_rounded_once(const std::vector<uint16_t>& got, const std::vector<float>& want, const std::string& what) {
  expect_within(widen(got), want, 1.0, what + " at bf16");
}

class BackendCpuDt : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(backend_.status, KEEL_OK) << g_last_error; }
  void* h() { return backend_.handle; }
  Backend backend_{R"({"peak_tflops": 1})"};
};

#define ASSERT_OK(call) ASSERT_EQ((call), KEEL_OK) << g_last_error

TEST_F(BackendCpuDt, MatmulForwardWithAndWithoutGelu) {
  const int64_t N = 9, IC = 24, OC = 17;
  const auto inp = bf16_values(N * IC, 1), weight = bf16_values(OC * IC, 2), bias = bf16_values(OC, 3);
  std::vector<float> ref(N * OC), ref_pre(N * OC), ref_gelu(N * OC);
  ASSERT_OK(api()->matmul_forward(h(), ref.data(), inp.f.data(), weight.f.data(), bias.f.data(), N, IC, OC));
  ASSERT_OK(api()->matmul_forward(h(), ref_pre.data(), inp.f.data(), weight.f.data(), bias.f.data(), N, IC, OC));
  ASSERT_OK(api()->gelu_forward(h(), ref_gelu.data(), ref_pre.data(), N * OC));

  std::vector<float> out(N * OC), pre(N * OC);
  ASSERT_OK(api()->matmul_forward_dt(h(), kFp32, out.data(), nullptr, inp.f.data(), weight.f.data(), bias.f.data(),
                                     N, IC, OC));
  expect_same_bits(out, ref, "matmul out");
  ASSERT_OK(api()->matmul_forward_dt(h(), kFp32, out.data(), pre.data(), inp.f.data(), weight.f.data(), bias.f.data(),
                                     N, IC, OC));
  expect_same_bits(pre, ref_pre, "matmul gelu_pre");
  expect_same_bits(out, ref_gelu, "matmul gelu out");

  std::vector<uint16_t> out16(N * OC), pre16(N * OC);
  ASSERT_OK(api()->matmul_forward_dt(h(), kBf16, out16.data(), nullptr, inp.h.data(), weight.h.data(), bias.h.data(),
                                     N, IC, OC));
  expect_rounded_once(out16, ref, "matmul out");
  ASSERT_OK(api()->matmul_forward_dt(h(), kBf16, out16.data(), pre16.data(), inp.h.data(), weight.h.data(),
                                     bias.h.data(), N, IC, OC));
  expect_rounded_once(pre16, ref_pre, "matmul gelu_pre");
  expect_rounded_once(out16, ref_gelu, "matmul gelu out (GELU of the fp32 product, rounded once)");
}

TEST_F(BackendCpuDt, MatmulBackward) {
  const int64_t N = 9, IC = 24, OC = 17;
  const auto dout = bf16_values(N * OC, 4), inp = bf16_values(N * IC, 5), weight = bf16_values(OC * IC, 6);
  const auto dinp0 = bf16_values(N * IC, 7);  // accumulated into
  const std::vector<float> dweight0 = random_floats(OC * IC, 8), dbias0 = random_floats(OC, 9);
  auto ref_dinp = dinp0.f, ref_dweight = dweight0, ref_dbias = dbias0;
  ASSERT_OK(api()->matmul_backward(h(), ref_dinp.data(), ref_dweight.data(), ref_dbias.data(), dout.f.data(),
                                   inp.f.data(), weight.f.data(), N, IC, OC));

  auto dinp = dinp0.f, dweight = dweight0, dbias = dbias0;
  ASSERT_OK(api()->matmul_backward_dt(h(), kFp32, dinp.data(), dweight.data(), dbias.data(), dout.f.data(),
                                      inp.f.data(), weight.f.data(), N, IC, OC));
  expect_same_bits(dinp, ref_dinp, "dinp");
  expect_same_bits(dweight, ref_dweight, "dweight");
  expect_same_bits(dbias, ref_dbias, "dbias");

  auto dinp16 = dinp0.h;
  dweight = dweight0, dbias = dbias0;
  ASSERT_OK(api()->matmul_backward_dt(h(), kBf16, dinp16.data(), dweight.data(), dbias.data(), dout.h.data(),
                                      inp.h.data(), weight.h.data(), N, IC, OC));
  expect_rounded_once(dinp16, ref_dinp, "dinp (initial value widened, sum rounded once)");
  expect_within(dweight, ref_dweight, 0.0, "dweight (fp32 at bf16)");
  expect_within(dbias, ref_dbias, 0.0, "dbias (fp32 at bf16)");
}

TEST_F(BackendCpuDt, LayernormForwardAndBackward) {
  const int64_t N = 7, C = 40;
  const auto inp = bf16_values(N * C, 10, -2, 3), weight = bf16_values(C, 11), bias = bf16_values(C, 12);
  std::vector<float> ref(N * C), ref_mean(N), ref_rstd(N);
  ASSERT_OK(api()->layernorm_forward(h(), ref.data(), ref_mean.data(), ref_rstd.data(), inp.f.data(), weight.f.data(),
                                     bias.f.data(), N, C));
  std::vector<float> out(N * C), mean(N), rstd(N);
  ASSERT_OK(api()->layernorm_forward_dt(h(), kFp32, out.data(), mean.data(), rstd.data(), inp.f.data(),
                                        weight.f.data(), bias.f.data(), N, C));
  expect_same_bits(out, ref, "layernorm out");
  expect_same_bits(mean, ref_mean, "mean");
  expect_same_bits(rstd, ref_rstd, "rstd");
  std::vector<uint16_t> out16(N * C);
  ASSERT_OK(api()->layernorm_forward_dt(h(), kBf16, out16.data(), mean.data(), rstd.data(), inp.h.data(),
                                        weight.h.data(), bias.h.data(), N, C));
  expect_rounded_once(out16, ref, "layernorm out");
  expect_within(mean, ref_mean, 0.0, "mean (fp32 at bf16)");
  expect_within(rstd, ref_rstd, 0.0, "rstd (fp32 at bf16)");

  const auto dout = bf16_values(N * C, 13), dinp0 = bf16_values(N * C, 14);
  const std::vector<float> dweight0 = random_floats(C, 15), dbias0 = random_floats(C, 16);
  auto ref_dinp = dinp0.f, ref_dweight = dweight0, ref_dbias = dbias0;
  ASSERT_OK(api()->layernorm_backward(h(), ref_dinp.data(), ref_dweight.data(), ref_dbias.data(), dout.f.data(),
                                      inp.f.data(), weight.f.data(), ref_mean.data(), ref_rstd.data(), N, C));
  auto dinp = dinp0.f, dweight = dweight0, dbias = dbias0;
  ASSERT_OK(api()->layernorm_backward_dt(h(), kFp32, dinp.data(), dweight.data(), dbias.data(), dout.f.data(),
                                         inp.f.data(), weight.f.data(), ref_mean.data(), ref_rstd.data(), N, C));
  expect_same_bits(dinp, ref_dinp, "layernorm dinp");
  expect_same_bits(dweight, ref_dweight, "layernorm dweight");
  expect_same_bits(dbias, ref_dbias, "layernorm dbias");
  auto dinp16 = dinp0.h;
  dweight = dweight0, dbias = dbias0;
  ASSERT_OK(api()->layernorm_backward_dt(h(), kBf16, dinp16.data(), dweight.data(), dbias.data(), dout.h.data(),
                                         inp.h.data(), weight.h.data(), ref_mean.data(), ref_rstd.data(), N, C));
  expect_rounded_once(dinp16, ref_dinp, "layernorm dinp");
  expect_within(dweight, ref_dweight, 0.0, "layernorm dweight (fp32 at bf16)");
  expect_within(dbias, ref_dbias, 0.0, "layernorm dbias (fp32 at bf16)");
}

TEST_F(BackendCpuDt, AttentionSavedBytesForwardAndBackward) {
  const int64_t B = 2, T = 9, C = 16, NH = 4;
  const int64_t floats = api()->attention_saved_floats(h(), B, T, C, NH);
  ASSERT_GT(floats, 0) << g_last_error;
  EXPECT_EQ(api()->attention_saved_bytes(h(), kFp32, B, T, C, NH), floats * 4);
  EXPECT_EQ(api()->attention_saved_bytes(h(), kBf16, B, T, C, NH), floats * 4) << "the cpu saves fp32 at bf16 too";
  EXPECT_EQ(api()->attention_saved_bytes(h(), kBf16, B, T, 10, 3), -1);

  const auto qkv = bf16_values(B * T * 3 * C, 17, -2, 2);
  std::vector<float> ref(B * T * C), ref_saved(floats);
  ASSERT_OK(api()->attention_forward(h(), ref.data(), ref_saved.data(), qkv.f.data(), B, T, C, NH));
  std::vector<float> out(B * T * C), saved(floats);
  ASSERT_OK(api()->attention_forward_dt(h(), kFp32, out.data(), saved.data(), qkv.f.data(), B, T, C, NH));
  expect_same_bits(out, ref, "attention out");
  expect_same_bits(saved, ref_saved, "attention saved");
  std::vector<uint16_t> out16(B * T * C);
  ASSERT_OK(api()->attention_forward_dt(h(), kBf16, out16.data(), saved.data(), qkv.h.data(), B, T, C, NH));
  expect_rounded_once(out16, ref, "attention out");
  expect_within(saved, ref_saved, 0.0, "attention saved (fp32 at bf16)");

  const auto dout = bf16_values(B * T * C, 18), dqkv0 = bf16_values(B * T * 3 * C, 19);
  auto ref_dqkv = dqkv0.f;
  ASSERT_OK(
      api()->attention_backward(h(), ref_dqkv.data(), dout.f.data(), qkv.f.data(), ref_saved.data(), B, T, C, NH));
  auto dqkv = dqkv0.f;
  ASSERT_OK(api()->attention_backward_dt(h(), kFp32, dqkv.data(), dout.f.data(), qkv.f.data(), out.data(),
                                         ref_saved.data(), B, T, C, NH));
  expect_same_bits(dqkv, ref_dqkv, "attention dqkv");
  auto dqkv16 = dqkv0.h;
  ASSERT_OK(api()->attention_backward_dt(h(), kBf16, dqkv16.data(), dout.h.data(), qkv.h.data(), out16.data(),
                                         ref_saved.data(), B, T, C, NH));
  expect_rounded_once(dqkv16, ref_dqkv, "attention dqkv");
}

TEST_F(BackendCpuDt, GeluForwardAndBackward) {
  const int64_t n = 70000;  // past the threading thresholds of gelu and of widening/rounding
  const auto inp = bf16_values(n, 20, -4, 4), dout = bf16_values(n, 21), dinp0 = bf16_values(n, 22);
  std::vector<float> ref(n), out(n);
  ASSERT_OK(api()->gelu_forward(h(), ref.data(), inp.f.data(), n));
  ASSERT_OK(api()->gelu_forward_dt(h(), kFp32, out.data(), inp.f.data(), n));
  expect_same_bits(out, ref, "gelu out");
  std::vector<uint16_t> out16(n);
  ASSERT_OK(api()->gelu_forward_dt(h(), kBf16, out16.data(), inp.h.data(), n));
  expect_rounded_once(out16, ref, "gelu out");

  auto ref_dinp = dinp0.f, dinp = dinp0.f;
  auto dinp16 = dinp0.h;
  ASSERT_OK(api()->gelu_backward(h(), ref_dinp.data(), inp.f.data(), dout.f.data(), n));
  ASSERT_OK(api()->gelu_backward_dt(h(), kFp32, dinp.data(), inp.f.data(), dout.f.data(), n));
  expect_same_bits(dinp, ref_dinp, "gelu dinp");
  ASSERT_OK(api()->gelu_backward_dt(h(), kBf16, dinp16.data(), inp.h.data(), dout.h.data(), n));
  expect_rounded_once(dinp16, ref_dinp, "gelu dinp");
}

TEST_F(BackendCpuDt, AddAccumulateScaleIncludingAnAliasedOutput) {
  const int64_t n = 1000;
  const auto a = bf16_values(n, 23), b = bf16_values(n, 24);
  std::vector<float> ref(n), out(n);
  ASSERT_OK(api()->add(h(), ref.data(), a.f.data(), b.f.data(), n));
  ASSERT_OK(api()->add_dt(h(), kFp32, out.data(), a.f.data(), b.f.data(), n));
  expect_same_bits(out, ref, "add out");
  auto a16 = a.h;  // out aliases a
  ASSERT_OK(api()->add_dt(h(), kBf16, a16.data(), a16.data(), b.h.data(), n));
  expect_rounded_once(a16, ref, "add out aliasing a");

  auto ref_acc = a.f, acc = a.f;
  auto acc16 = a.h;
  ASSERT_OK(api()->accumulate(h(), ref_acc.data(), b.f.data(), n));
  ASSERT_OK(api()->accumulate_dt(h(), kFp32, acc.data(), b.f.data(), n));
  expect_same_bits(acc, ref_acc, "accumulate dst");
  ASSERT_OK(api()->accumulate_dt(h(), kBf16, acc16.data(), b.h.data(), n));
  expect_rounded_once(acc16, ref_acc, "accumulate dst");

  auto ref_scaled = a.f, scaled = a.f;
  auto scaled16 = a.h;
  ASSERT_OK(api()->scale(h(), ref_scaled.data(), 0.3f, n));
  ASSERT_OK(api()->scale_dt(h(), kFp32, scaled.data(), 0.3f, n));
  expect_same_bits(scaled, ref_scaled, "scale x");
  ASSERT_OK(api()->scale_dt(h(), kBf16, scaled16.data(), 0.3f, n));
  expect_rounded_once(scaled16, ref_scaled, "scale x");
}

TEST_F(BackendCpuDt, EmbeddingForwardAndBackward) {
  const int64_t B = 2, T = 5, C = 4000, Vp = 11, maxT = 8;  // B·T·C past the threading threshold
  const std::vector<int32_t> tokens = {3, 0, 10, 3, 7, 1, 1, 9, 4, 3};  // repeats; the last row of the table
  const auto wte = bf16_values(Vp * C, 25), wpe = bf16_values(maxT * C, 26);
  std::vector<float> ref(B * T * C), out(B * T * C);
  ASSERT_OK(api()->embedding_forward(h(), ref.data(), tokens.data(), wte.f.data(), wpe.f.data(), B, T, C));
  ASSERT_OK(api()->embedding_forward_dt(h(), kFp32, out.data(), tokens.data(), wte.f.data(), wpe.f.data(), B, T, C));
  expect_same_bits(out, ref, "embedding out");
  std::vector<uint16_t> out16(B * T * C);
  ASSERT_OK(api()->embedding_forward_dt(h(), kBf16, out16.data(), tokens.data(), wte.h.data(), wpe.h.data(), B, T, C));
  expect_rounded_once(out16, ref, "embedding out");

  const auto dout = bf16_values(B * T * C, 27);
  const std::vector<float> dwte0 = random_floats(Vp * C, 28), dwpe0 = random_floats(maxT * C, 29);
  auto ref_dwte = dwte0, ref_dwpe = dwpe0, dwte = dwte0, dwpe = dwpe0;
  ASSERT_OK(api()->embedding_backward(h(), ref_dwte.data(), ref_dwpe.data(), dout.f.data(), tokens.data(), B, T, C));
  ASSERT_OK(api()->embedding_backward_dt(h(), kFp32, dwte.data(), dwpe.data(), dout.f.data(), tokens.data(), B, T, C));
  expect_same_bits(dwte, ref_dwte, "dwte");
  expect_same_bits(dwpe, ref_dwpe, "dwpe");
  dwte = dwte0, dwpe = dwpe0;
  ASSERT_OK(api()->embedding_backward_dt(h(), kBf16, dwte.data(), dwpe.data(), dout.h.data(), tokens.data(), B, T, C));
  expect_within(dwte, ref_dwte, 0.0, "dwte (fp32 at bf16)");
  expect_within(dwpe, ref_dwpe, 0.0, "dwpe (fp32 at bf16)");
}

TEST_F(BackendCpuDt, EmbeddingRowsForwardAndBackward) {
  const int64_t B = 2, T = 5, C = 12, row_begin = 4, rows = 4, maxT = 8;
  const std::vector<int32_t> tokens = {3, 4, 10, 7, 7, 1, 5, 9, 4, 6};  // some in [4, 8), some not
  const auto wte_rows = bf16_values(rows * C, 30), wpe = bf16_values(maxT * C, 31);
  for (const bool with_wpe : {true, false}) {
    const std::string what = with_wpe ? "rows out with wpe" : "rows out without wpe";
    const float* wpe32 = with_wpe ? wpe.f.data() : nullptr;
    const uint16_t* wpe16 = with_wpe ? wpe.h.data() : nullptr;
    std::vector<float> ref(B * T * C), out(B * T * C);
    ASSERT_OK(api()->embedding_rows_forward(h(), ref.data(), tokens.data(), wte_rows.f.data(), wpe32, B, T, C,
                                            row_begin, rows));
    ASSERT_OK(api()->embedding_rows_forward_dt(h(), kFp32, out.data(), tokens.data(), wte_rows.f.data(), wpe32, B, T,
                                               C, row_begin, rows));
    expect_same_bits(out, ref, what);
    std::vector<uint16_t> out16(B * T * C, 0x7FC0);  // NaN: every element must be written
    ASSERT_OK(api()->embedding_rows_forward_dt(h(), kBf16, out16.data(), tokens.data(), wte_rows.h.data(), wpe16, B,
                                               T, C, row_begin, rows));
    expect_rounded_once(out16, ref, what);
  }
  const auto dout = bf16_values(B * T * C, 32);
  const std::vector<float> dwte0 = random_floats(rows * C, 33), dwpe0 = random_floats(maxT * C, 34);
  auto ref_dwte = dwte0, ref_dwpe = dwpe0, dwte = dwte0, dwpe = dwpe0;
  ASSERT_OK(api()->embedding_rows_backward(h(), ref_dwte.data(), ref_dwpe.data(), dout.f.data(), tokens.data(), B, T,
                                           C, row_begin, rows));
  ASSERT_OK(api()->embedding_rows_backward_dt(h(), kFp32, dwte.data(), dwpe.data(), dout.f.data(), tokens.data(), B,
                                              T, C, row_begin, rows));
  expect_same_bits(dwte, ref_dwte, "rows dwte");
  expect_same_bits(dwpe, ref_dwpe, "rows dwpe");
  dwte = dwte0, dwpe = dwpe0;
  ASSERT_OK(api()->embedding_rows_backward_dt(h(), kBf16, dwte.data(), dwpe.data(), dout.h.data(), tokens.data(), B,
                                              T, C, row_begin, rows));
  expect_within(dwte, ref_dwte, 0.0, "rows dwte (fp32 at bf16)");
  expect_within(dwpe, ref_dwpe, 0.0, "rows dwpe (fp32 at bf16)");
}

// Naive log Σ exp over the first V columns of a row, in double.
double naive_lse(const float* row, int64_t V) {
  double max = -INFINITY, sum = 0;
  for (int64_t i = 0; i < V; ++i) max = std::max(max, double(row[i]));
  for (int64_t i = 0; i < V; ++i) sum += std::exp(row[i] - max);
  return max + std::log(sum);
}

TEST_F(BackendCpuDt, CrossentropyStatsAndBackward) {
  const int64_t N = 5, V = 37, Vp = 40;
  const std::vector<int32_t> targets = {3, -1, 36, 0, 20};
  const auto logits = bf16_values(N * Vp, 35, -3, 3);
  std::vector<float> ref_stats(N * 3), stats(N * 3);
  ASSERT_OK(api()->crossentropy_shard_stats(h(), ref_stats.data(), logits.f.data(), targets.data(), N, 0, V, Vp));
  ASSERT_OK(api()->crossentropy_stats_dt(h(), kFp32, stats.data(), logits.f.data(), targets.data(), N, 0, V, Vp));
  expect_same_bits(stats, ref_stats, "stats");
  ASSERT_OK(api()->crossentropy_stats_dt(h(), kBf16, stats.data(), logits.h.data(), targets.data(), N, 0, V, Vp));
  expect_within(stats, ref_stats, 0.0, "stats (fp32 at bf16)");

  std::vector<float> lse(N);
  for (int64_t n = 0; n < N; ++n) lse[n] = static_cast<float>(naive_lse(logits.f.data() + n * Vp, V));
  const float dloss = 0.2f;
  const auto dlogits0 = bf16_values(N * Vp, 36);
  auto ref = dlogits0.f, d = dlogits0.f;
  ASSERT_OK(api()->crossentropy_shard_backward(h(), ref.data(), logits.f.data(), lse.data(), targets.data(), dloss, N,
                                               0, V, Vp));
  ASSERT_OK(api()->crossentropy_backward_dt(h(), kFp32, d.data(), logits.f.data(), lse.data(), targets.data(), dloss,
                                            N, 0, V, Vp));
  expect_same_bits(d, ref, "dlogits (added)");
  auto d16 = dlogits0.h;
  ASSERT_OK(api()->crossentropy_backward_dt(h(), kBf16, d16.data(), logits.h.data(), lse.data(), targets.data(),
                                            dloss, N, 0, V, Vp));
  expect_rounded_once(d16, ref, "dlogits (added)");

  // In place: the logits become the gradient, which is what the fp32 slot adds to zeros; the
  // padding columns and the ignored row, where the gradient is zero, become zero.
  std::vector<float> ref_grad(N * Vp, 0.0f);
  ASSERT_OK(api()->crossentropy_shard_backward(h(), ref_grad.data(), logits.f.data(), lse.data(), targets.data(),
                                               dloss, N, 0, V, Vp));
  auto in_place = logits.f;
  ASSERT_OK(api()->crossentropy_backward_dt(h(), kFp32, in_place.data(), in_place.data(), lse.data(), targets.data(),
                                            dloss, N, 0, V, Vp));
  expect_same_bits(in_place, ref_grad, "dlogits in place");
  auto in_place16 = logits.h;
  ASSERT_OK(api()->crossentropy_backward_dt(h(), kBf16, in_place16.data(), in_place16.data(), lse.data(),
                                            targets.data(), dloss, N, 0, V, Vp));
  expect_rounded_once(in_place16, ref_grad, "dlogits in place");
}

TEST_F(BackendCpuDt, CombineOverShardsEqualsTheUnshardedLseAndTheNaiveLoss) {
  // Shards of the 37 real columns of 40: [0, 20), [20, 37) plus 3 padding, and a third of
  // padding only (no valid column: m = -inf, which must add nothing).
  const int64_t N = 6, V = 37, Vp = 40;
  const std::vector<int32_t> targets = {3, -1, 36, 0, 20, 19};
  const std::vector<float> logits = random_floats(N * Vp, 37, -4, 4);
  std::vector<float> whole(N * 3);
  ASSERT_OK(api()->crossentropy_stats_dt(h(), kFp32, whole.data(), logits.data(), targets.data(), N, 0, V, Vp));

  struct Shard {
    int64_t col_begin, valid_cols, cols;
  };
  const Shard shards[] = {{0, 20, 20}, {20, 17, 20}, {40, 0, 4}};
  std::vector<float> stacked;
  for (const Shard& s : shards) {
    std::vector<float> block(N * s.cols, 0.0f), stats(N * 3);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < s.valid_cols; ++i) block[n * s.cols + i] = logits[n * Vp + s.col_begin + i];
    ASSERT_OK(api()->crossentropy_stats_dt(h(), kFp32, stats.data(), block.data(), targets.data(), N, s.col_begin,
                                           s.valid_cols, s.cols));
    stacked.insert(stacked.end(), stats.begin(), stats.end());
  }

  const float weight = 0.25f, loss0 = 1.5f;
  std::vector<float> lse_whole(N);
  float loss_whole = loss0;
  ASSERT_OK(
      api()->crossentropy_combine(h(), lse_whole.data(), &loss_whole, whole.data(), 1, targets.data(), N, weight));
  double naive_loss = 0;
  std::vector<double> naive(N);
  for (int64_t n = 0; n < N; ++n) {
    naive[n] = naive_lse(logits.data() + n * Vp, V);
    if (targets[n] >= 0) naive_loss += naive[n] - logits[n * Vp + targets[n]];
  }
  // fp32 statistics: a sum of V exponentials carries ~V·2^-24 relative error, so lse ~1e-5
  // absolute, and the loss up to N times that.
  const double want = loss0 + weight * naive_loss;
  for (int64_t n = 0; n < N; ++n) EXPECT_NEAR(lse_whole[n], naive[n], 1e-5) << "unsharded lse, row " << n;
  EXPECT_NEAR(loss_whole, want, 1e-5 * N) << "the loss added to loss_sum, one shard";
  for (const int32_t n_shards : {2, 3}) {  // the two real shards; then with the padding-only one
    std::vector<float> lse(N);
    float loss = loss0;
    ASSERT_OK(api()->crossentropy_combine(h(), lse.data(), &loss, stacked.data(), n_shards, targets.data(), N, weight));
    for (int64_t n = 0; n < N; ++n)
      EXPECT_NEAR(lse[n], lse_whole[n], 1e-5) << n_shards << " shards' lse vs the unsharded one, row " << n;
    EXPECT_NEAR(loss, want, 1e-5 * N) << "the loss over " << n_shards << " shards";
  }

  EXPECT_EQ(api()->crossentropy_combine(h(), lse_whole.data(), &loss_whole, whole.data(), 0, targets.data(), N, 1.0f),
            KEEL_ERR_INVALID_ARGUMENT);
}

TEST_F(BackendCpuDt, SumSquaresAddsOnceIntoTheScalar) {
  const int64_t n = 5000;
  const auto x = bf16_values(n, 38, -3, 3);
  double ref = 0;
  ASSERT_OK(api()->sum_squares(h(), x.f.data(), n, &ref));
  const float acc0 = 0.75f;
  float acc = acc0;
  ASSERT_OK(api()->sum_squares_dt(h(), kFp32, x.f.data(), n, &acc));
  EXPECT_EQ(float_bits(acc), float_bits(static_cast<float>(acc0 + ref))) << "acc + the double sum, rounded once";
  float acc16 = acc0;
  ASSERT_OK(api()->sum_squares_dt(h(), kBf16, x.h.data(), n, &acc16));
  EXPECT_NEAR(acc16, acc0 + ref, 1e-6 * (acc0 + ref)) << "the same numbers widened: the fp32 result (one rounding)";
}

TEST_F(BackendCpuDt, AnElementTypeTheCpuDoesNotRunIsRefusedNamingTheOp) {
  const keel_dtype fp16{KEEL_DTYPE_FLOAT, 16, 1};
  std::vector<float> x(4, 1.0f);
  EXPECT_EQ(api()->gelu_forward_dt(h(), fp16, x.data(), x.data(), 4), KEEL_ERR_UNIMPLEMENTED);
  EXPECT_NE(g_last_error.find("gelu_forward_dt: the cpu backend runs fp32 and bf16, not dtype {code 2, bits 16"),
            std::string::npos)
      << g_last_error;
  EXPECT_EQ(api()->attention_saved_bytes(h(), fp16, 1, 4, 8, 2), -1);
  EXPECT_NE(g_last_error.find("attention_saved_bytes"), std::string::npos) << g_last_error;
}

}  // namespace
