// The cpu backend's ABI 0.9 slots (the Llama family's ops) through its table. At fp32: RMSNorm,
// RoPE and SwiGLU against naive double references; grouped-query attention against the 0.8
// attention op run on q with its key/value heads repeated per query head (transformers'
// repeat_kv), the gradients of the repeated heads summed back; NKV = NH equal to the 0.8 op bit
// for bit. At bf16: each op within one rounding of the fp32 slot on the same bf16-representable
// inputs (see backend_dt_test.cpp), fp32 outputs (rstd, dweight) within sum-order noise. Bad
// shapes are refused naming the op.
#include <cmath>
#include <complex>
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

// |got - want| <= rounds·2^-8·|want| + 1e-6·max|want|.
void expect_within(const std::vector<float>& got, const std::vector<float>& want, double rounds, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (float x : want) scale = std::max(scale, double(std::fabs(x)));
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(double(got[i]) - want[i]) <= rounds * std::fabs(want[i]) / 256 + 1e-6 * scale) && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " off; first [" << first << "]: got " << got[first]
                     << ", want " << want[first];
}

class BackendCpuLlama : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(backend_.status, KEEL_OK) << g_last_error;
    ASSERT_TRUE(api()->rmsnorm_forward_dt && api()->rope_forward_dt && api()->swiglu_forward_dt &&
                api()->attention_gqa_forward_dt)
        << "the cpu backend fills the 0.9 slots";
  }
  void* h() { return backend_.handle; }
  Backend backend_{R"({"peak_tflops": 1})"};
};

TEST_F(BackendCpuLlama, RmsnormForwardAndBackward) {
  const int64_t N = 11, C = 24;
  const float eps = 1e-5f;
  const auto inp = bf16_values(N * C, 1, -2, 2), weight = bf16_values(C, 2), dout = bf16_values(N * C, 3);
  std::vector<float> out(N * C), rstd(N);
  ASSERT_OK(api()->rmsnorm_forward_dt(h(), kFp32, out.data(), rstd.data(), inp.f.data(), weight.f.data(), N, C, eps));
  std::vector<double> want(N * C), want_dx(N * C, 0.0), want_dw(C, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double sq = 0, wgx = 0;
    for (int64_t i = 0; i < C; ++i) sq += double(inp.f[n * C + i]) * inp.f[n * C + i];
    const double s = 1 / std::sqrt(sq / C + eps);
    for (int64_t i = 0; i < C; ++i) {
      want[n * C + i] = inp.f[n * C + i] * s * weight.f[i];
      wgx += double(weight.f[i]) * dout.f[n * C + i] * inp.f[n * C + i];
      want_dw[i] += double(dout.f[n * C + i]) * inp.f[n * C + i] * s;
    }
    for (int64_t i = 0; i < C; ++i)
      want_dx[n * C + i] = s * weight.f[i] * dout.f[n * C + i] - s * s * s * inp.f[n * C + i] * wgx / C;
  }
  expect_close(out, want, 1e-6, 1e-5, "rmsnorm out");
  std::vector<float> dinp(N * C, 0.0f), dweight(C, 0.0f);
  ASSERT_OK(api()->rmsnorm_backward_dt(h(), kFp32, dinp.data(), dweight.data(), dout.f.data(), inp.f.data(),
                                       weight.f.data(), rstd.data(), N, C));
  expect_close(dinp, want_dx, 1e-5, 1e-4, "rmsnorm dinp");
  expect_close(dweight, want_dw, 1e-5, 1e-4, "rmsnorm dweight");

  std::vector<uint16_t> out16(N * C), dinp16(N * C, 0);
  std::vector<float> rstd16(N), dweight16(C, 0.0f);
  ASSERT_OK(api()->rmsnorm_forward_dt(h(), kBf16, out16.data(), rstd16.data(), inp.h.data(), weight.h.data(), N, C, eps));
  expect_within(widen(out16), out, 1.0, "rmsnorm out at bf16");
  expect_within(rstd16, rstd, 0.0, "rmsnorm rstd (fp32 at bf16)");
  ASSERT_OK(api()->rmsnorm_backward_dt(h(), kBf16, dinp16.data(), dweight16.data(), dout.h.data(), inp.h.data(),
                                       weight.h.data(), rstd.data(), N, C));
  expect_within(widen(dinp16), dinp, 1.0, "rmsnorm dinp at bf16");
  expect_within(dweight16, dweight, 0.0, "rmsnorm dweight (fp32 at bf16)");
  EXPECT_EQ(api()->rmsnorm_forward_dt(h(), kFp32, out.data(), rstd.data(), inp.f.data(), weight.f.data(), N, C, 0.0f),
            KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("rmsnorm_forward_dt: eps"), std::string::npos) << g_last_error;
}

TEST_F(BackendCpuLlama, RopeTurnsTheKeyHeadsOfAQkvRowAndItsBackwardTurnsThemBack) {
  const int64_t B = 2, T = 13, NH = 4, NKV = 2, D = 8, C = NH * D, row = C + 2 * NKV * D;
  std::vector<float> inv_freq(D / 2);
  for (int64_t i = 0; i < D / 2; ++i) inv_freq[i] = float(std::pow(10000.0, -2.0 * double(i) / D));
  const auto qkv = bf16_values(B * T * row, 4, -2, 2);
  auto x = qkv.f;
  ASSERT_OK(api()->rope_forward_dt(h(), kFp32, x.data(), inv_freq.data(), B, T, NKV, D, row, C, 5));
  std::vector<double> want(qkv.f.begin(), qkv.f.end());
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t k = 0; k < NKV; ++k)
      for (int64_t i = 0; i < D / 2; ++i) {
        double* a = &want[r * row + C + k * D + i];
        const std::complex<double> z = std::complex<double>(*a, a[D / 2]) * std::polar(1.0, double(5 + r % T) * inv_freq[i]);
        *a = z.real();
        a[D / 2] = z.imag();
      }
  expect_close(x, want, 1e-5, 1e-5, "rope on the k heads (q and v untouched)");
  auto back = x;
  ASSERT_OK(api()->rope_backward_dt(h(), kFp32, back.data(), inv_freq.data(), B, T, NKV, D, row, C, 5));
  expect_close(back, std::vector<double>(qkv.f.begin(), qkv.f.end()), 1e-5, 1e-5, "rope backward undoes the turn");

  auto x16 = qkv.h;
  ASSERT_OK(api()->rope_forward_dt(h(), kBf16, x16.data(), inv_freq.data(), B, T, NKV, D, row, C, 5));
  expect_within(widen(x16), x, 1.0, "rope at bf16");
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t c = 0; c < row; ++c)
      if (c < C || c >= C + NKV * D) ASSERT_EQ(x16[r * row + c], qkv.h[r * row + c]) << "bf16 row " << r << " col " << c;
  EXPECT_EQ(api()->rope_forward_dt(h(), kFp32, x.data(), inv_freq.data(), B, T, NKV, D, row, row - 1, 0),
            KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("past the row stride"), std::string::npos) << g_last_error;
}

TEST_F(BackendCpuLlama, SwigluForwardAndBackward) {
  const int64_t N = 7, F = 19;
  const auto gate_up = bf16_values(N * 2 * F, 5, -5, 5), dout = bf16_values(N * F, 6);
  std::vector<float> out(N * F), dgate_up(N * 2 * F, 0.0f);
  ASSERT_OK(api()->swiglu_forward_dt(h(), kFp32, out.data(), gate_up.f.data(), N, F));
  ASSERT_OK(api()->swiglu_backward_dt(h(), kFp32, dgate_up.data(), dout.f.data(), gate_up.f.data(), N, F));
  std::vector<double> want(N * F), want_d(N * 2 * F);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < F; ++i) {
      const double g = gate_up.f[n * 2 * F + i], u = gate_up.f[n * 2 * F + F + i], s = 1 / (1 + std::exp(-g));
      want[n * F + i] = g * s * u;
      want_d[n * 2 * F + i] = dout.f[n * F + i] * u * (s + g * s * (1 - s));
      want_d[n * 2 * F + F + i] = dout.f[n * F + i] * g * s;
    }
  expect_close(out, want, 1e-6, 1e-5, "swiglu out");
  expect_close(dgate_up, want_d, 1e-6, 1e-5, "swiglu dgate_up");
  std::vector<uint16_t> out16(N * F), dgate_up16(N * 2 * F, 0);
  ASSERT_OK(api()->swiglu_forward_dt(h(), kBf16, out16.data(), gate_up.h.data(), N, F));
  ASSERT_OK(api()->swiglu_backward_dt(h(), kBf16, dgate_up16.data(), dout.h.data(), gate_up.h.data(), N, F));
  expect_within(widen(out16), out, 1.0, "swiglu out at bf16");
  expect_within(widen(dgate_up16), dgate_up, 1.0, "swiglu dgate_up at bf16");
}

// qkv with NKV key/value heads -> the same with each query head's key/value head repeated (NH).
std::vector<float> repeat_kv(const std::vector<float>& qkv, int64_t BT, int64_t NH, int64_t NKV, int64_t hs) {
  const int64_t C = NH * hs, row = C + 2 * NKV * hs;
  std::vector<float> out(BT * 3 * C);
  for (int64_t r = 0; r < BT; ++r) {
    for (int64_t c = 0; c < C; ++c) out[r * 3 * C + c] = qkv[r * row + c];
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t i = 0; i < hs; ++i) {
        const int64_t g = h / (NH / NKV);
        out[r * 3 * C + C + h * hs + i] = qkv[r * row + C + g * hs + i];
        out[r * 3 * C + 2 * C + h * hs + i] = qkv[r * row + C + NKV * hs + g * hs + i];
      }
  }
  return out;
}

// The gradient of repeat_kv: each key/value head gets the sum of its copies'.
std::vector<double> sum_repeated(const std::vector<float>& d, int64_t BT, int64_t NH, int64_t NKV, int64_t hs) {
  const int64_t C = NH * hs, row = C + 2 * NKV * hs;
  std::vector<double> out(BT * row, 0.0);
  for (int64_t r = 0; r < BT; ++r) {
    for (int64_t c = 0; c < C; ++c) out[r * row + c] = d[r * 3 * C + c];
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t i = 0; i < hs; ++i) {
        const int64_t g = h / (NH / NKV);
        out[r * row + C + g * hs + i] += d[r * 3 * C + C + h * hs + i];
        out[r * row + C + NKV * hs + g * hs + i] += d[r * 3 * C + 2 * C + h * hs + i];
      }
  }
  return out;
}

TEST_F(BackendCpuLlama, GroupedQueryAttentionEqualsMultiHeadOnRepeatedKeyValueHeads) {
  const int64_t B = 2, T = 11, hs = 4;
  for (int64_t NKV : {int64_t{6}, int64_t{2}, int64_t{1}}) {
    SCOPED_TRACE("NKV " + std::to_string(NKV));
    const int64_t NH = 6, C = NH * hs, row = C + 2 * NKV * hs;
    const int64_t bytes = api()->attention_gqa_saved_bytes(h(), kFp32, B, T, C, NH, NKV);
    ASSERT_EQ(bytes, api()->attention_saved_bytes(h(), kFp32, B, T, C, NH)) << "probabilities per query head";
    const auto qkv = bf16_values(B * T * row, 7, -2, 2), dout = bf16_values(B * T * C, 8);
    const std::vector<float> full = repeat_kv(qkv.f, B * T, NH, NKV, hs);
    std::vector<float> ref(B * T * C), ref_saved(bytes / 4), ref_d(full.size(), 0.0f);
    ASSERT_OK(api()->attention_forward_dt(h(), kFp32, ref.data(), ref_saved.data(), full.data(), B, T, C, NH));
    ASSERT_OK(api()->attention_backward_dt(h(), kFp32, ref_d.data(), dout.f.data(), full.data(), ref.data(),
                                           ref_saved.data(), B, T, C, NH));
    std::vector<float> out(B * T * C), saved(bytes / 4), dqkv(B * T * row, 0.0f);
    ASSERT_OK(api()->attention_gqa_forward_dt(h(), kFp32, out.data(), saved.data(), qkv.f.data(), B, T, C, NH, NKV));
    ASSERT_OK(api()->attention_gqa_backward_dt(h(), kFp32, dqkv.data(), dout.f.data(), qkv.f.data(), out.data(),
                                               saved.data(), B, T, C, NH, NKV));
    if (NKV == NH) {
      for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(float_bits(out[i]), float_bits(ref[i])) << "out " << i;
      for (size_t i = 0; i < dqkv.size(); ++i) ASSERT_EQ(float_bits(dqkv[i]), float_bits(ref_d[i])) << "dqkv " << i;
    }
    expect_close(out, std::vector<double>(ref.begin(), ref.end()), 1e-6, 1e-5, "gqa out");
    expect_close(dqkv, sum_repeated(ref_d, B * T, NH, NKV, hs), 1e-6, 1e-5, "gqa dqkv");

    std::vector<uint16_t> out16(B * T * C), dqkv16(B * T * row, 0);
    ASSERT_OK(api()->attention_gqa_forward_dt(h(), kBf16, out16.data(), saved.data(), qkv.h.data(), B, T, C, NH, NKV));
    ASSERT_OK(api()->attention_gqa_backward_dt(h(), kBf16, dqkv16.data(), dout.h.data(), qkv.h.data(), out16.data(),
                                               saved.data(), B, T, C, NH, NKV));
    expect_within(widen(out16), out, 1.0, "gqa out at bf16");
    expect_within(widen(dqkv16), dqkv, 1.0, "gqa dqkv at bf16");
  }
  EXPECT_EQ(api()->attention_gqa_saved_bytes(h(), kFp32, B, T, 24, 6, 4), -1) << "6 query heads over 4 kv heads";
  EXPECT_NE(g_last_error.find("must be a positive multiple of NKV = 4"), std::string::npos) << g_last_error;
}

}  // namespace
