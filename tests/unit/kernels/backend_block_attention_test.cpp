// The cpu backend's attention over blocks (backend.h keel_attention_args, 0.19) and rope at given
// positions, through its table. Oracles: a naive double attention that masks each query to the
// keys of its own document (out, lse and every gradient); the 0.9 grouped-query op on the same
// fused rows when there are no documents; two key/value blocks merged by their statistics
// (attention_merge_dt) equal one block holding both (what context parallelism does), forward and
// backward, and a block that saw no key adds nothing to the merge; rope at positions
// equal to rope_forward_dt per document. bf16 within one rounding of fp32 on the same inputs, with
// q, kv, dq and dkv interleaved in one buffer. Bad arguments are refused naming the op.
#include <cmath>
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

#define ASSERT_OK(call) ASSERT_EQ((call), KEEL_OK) << g_last_error

struct Shape {
  int64_t B, T, NH, NKV, hs;
  int64_t C() const { return NH * hs; }
  int64_t W() const { return C() + 2 * NKV * hs; }  // a fused qkv row
};

// Positions restarting at each document: documents of the given lengths, repeated to fill T.
std::vector<int32_t> packed_positions(const Shape& s, const std::vector<int>& lengths) {
  std::vector<int32_t> positions;
  for (int64_t b = 0; b < s.B; ++b) {
    int64_t t = 0;
    for (size_t d = 0; t < s.T; d = (d + 1 + b) % lengths.size())
      for (int p = 0; p < lengths[d] && t < s.T; ++p, ++t) positions.push_back(p);
  }
  return positions;
}

struct Reference {
  std::vector<double> out, lse, dqkv;
};

// Naive attention on fused rows: query t of row b sees keys t - p .. t (p its position, t when
// there are none); out, lse, and dqkv for dout.
Reference naive_attention(const Shape& s, const std::vector<float>& qkv, const std::vector<int32_t>* positions,
                          const std::vector<float>& dout) {
  const int64_t W = s.W(), C = s.C(), group = s.NH / s.NKV;
  const double scale = 1.0 / std::sqrt(double(s.hs));
  Reference r{std::vector<double>(s.B * s.T * C), std::vector<double>(s.B * s.NH * s.T),
              std::vector<double>(s.B * s.T * W, 0.0)};
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.NH; ++h)
      for (int64_t t = 0; t < s.T; ++t) {
        const int64_t p = positions ? (*positions)[b * s.T + t] : t, lo = t - p;
        const int64_t g = h / group;
        auto q = [&](int64_t d) { return double(qkv[(b * s.T + t) * W + h * s.hs + d]); };
        auto k = [&](int64_t u, int64_t d) { return double(qkv[(b * s.T + u) * W + C + g * s.hs + d]); };
        auto v = [&](int64_t u, int64_t d) { return double(qkv[(b * s.T + u) * W + C + s.NKV * s.hs + g * s.hs + d]); };
        std::vector<double> score(size_t(t - lo + 1));
        double max = -1e300;
        for (int64_t u = lo; u <= t; ++u) {
          double dot = 0;
          for (int64_t d = 0; d < s.hs; ++d) dot += q(d) * k(u, d);
          score[size_t(u - lo)] = dot * scale;
          max = std::max(max, dot * scale);
        }
        double sum = 0;
        for (double x : score) sum += std::exp(x - max);
        const double lse = max + std::log(sum);
        r.lse[(b * s.NH + h) * s.T + t] = lse;
        std::vector<double> prob(score.size()), dprob(score.size());
        for (size_t i = 0; i < score.size(); ++i) prob[i] = std::exp(score[i] - lse);
        double D = 0;
        for (int64_t d = 0; d < s.hs; ++d) {
          double o = 0;
          for (int64_t u = lo; u <= t; ++u) o += prob[size_t(u - lo)] * v(u, d);
          r.out[(b * s.T + t) * C + h * s.hs + d] = o;
          D += o * dout[(b * s.T + t) * C + h * s.hs + d];
        }
        for (int64_t u = lo; u <= t; ++u) {
          double dp = 0;
          for (int64_t d = 0; d < s.hs; ++d) dp += dout[(b * s.T + t) * C + h * s.hs + d] * v(u, d);
          const double ds = prob[size_t(u - lo)] * (dp - D) * scale;
          for (int64_t d = 0; d < s.hs; ++d) {
            r.dqkv[(b * s.T + t) * W + h * s.hs + d] += ds * k(u, d);
            r.dqkv[(b * s.T + u) * W + C + g * s.hs + d] += ds * q(d);
            r.dqkv[(b * s.T + u) * W + C + s.NKV * s.hs + g * s.hs + d] +=
                prob[size_t(u - lo)] * dout[(b * s.T + t) * C + h * s.hs + d];
          }
        }
      }
  return r;
}

// Arguments for fused rows: q at column 0, kv at column C, dq and dkv likewise in dqkv.
keel_attention_args fused_args(const Shape& s, keel_dtype dt, size_t elem, const void* qkv, void* out, float* lse,
                               const int32_t* positions) {
  keel_attention_args a{};
  a.struct_size = sizeof(a);
  a.dt = dt;
  a.B = s.B, a.Tq = s.T, a.Tkv = s.T, a.NH = s.NH, a.NKV = s.NKV, a.hs = s.hs;
  a.q = qkv, a.q_stride = s.W();
  a.kv = static_cast<const char*>(qkv) + s.C() * elem, a.kv_stride = s.W();
  a.out = out, a.out_stride = s.C();
  a.lse = lse;
  a.positions = positions;
  return a;
}
void set_grads(keel_attention_args& a, const Shape& s, size_t elem, const void* dout, void* dqkv) {
  a.dout = dout;
  a.dq = dqkv;
  a.dkv = static_cast<char*>(dqkv) + s.C() * elem;
}

class BackendCpuBlockAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(backend_.status, KEEL_OK) << g_last_error;
    ASSERT_TRUE(api()->attention_block_forward && api()->attention_block_backward && api()->rope_at_forward_dt &&
                api()->rope_at_backward_dt)
        << "the cpu backend fills the 0.19 attention-over-blocks slots";
  }
  void* h() { return backend_.handle; }
  Backend backend_{R"({"peak_tflops": 1})"};
};

// Packed rows (documents of 5, 30 and 35 tokens, offset per row) across two query blocks of 64,
// grouped-query heads: out, lse, dq, dk and dv equal the naive per-document attention.
TEST_F(BackendCpuBlockAttention, DocumentsMatchNaivePerDocumentAttention) {
  const Shape s{2, 90, 4, 2, 8};
  const auto qkv = random_floats(s.B * s.T * s.W(), 1), dout = random_floats(s.B * s.T * s.C(), 2);
  const auto positions = packed_positions(s, {5, 30, 35});
  std::vector<float> out(s.B * s.T * s.C()), lse(s.B * s.NH * s.T), dqkv = random_floats(s.B * s.T * s.W(), 3);
  const std::vector<float> dqkv0 = dqkv;
  keel_attention_args a = fused_args(s, kFp32, sizeof(float), qkv.data(), out.data(), lse.data(), positions.data());
  ASSERT_OK(api()->attention_block_forward(h(), &a));
  set_grads(a, s, sizeof(float), dout.data(), dqkv.data());
  ASSERT_OK(api()->attention_block_backward(h(), &a));
  const Reference want = naive_attention(s, qkv, &positions, dout);
  expect_close(out, want.out, 1e-6, 1e-5, "out");
  expect_close(lse, want.lse, 1e-5, 1e-6, "lse");
  expect_close(dqkv, plus(dqkv0, want.dqkv), 1e-6, 1e-5, "dqkv (+= onto what was there)");
}

// Without positions the op is causal attention: the 0.9 grouped-query op's output and gradients.
TEST_F(BackendCpuBlockAttention, NoDocumentsEqualsGroupedQueryOp) {
  const Shape s{2, 70, 6, 2, 16};
  const auto qkv = random_floats(s.B * s.T * s.W(), 4), dout = random_floats(s.B * s.T * s.C(), 5);
  std::vector<float> out(s.B * s.T * s.C()), lse(s.B * s.NH * s.T), dqkv(s.B * s.T * s.W(), 0.0f);
  keel_attention_args a = fused_args(s, kFp32, sizeof(float), qkv.data(), out.data(), lse.data(), nullptr);
  ASSERT_OK(api()->attention_block_forward(h(), &a));
  set_grads(a, s, sizeof(float), dout.data(), dqkv.data());
  ASSERT_OK(api()->attention_block_backward(h(), &a));

  const int64_t saved = api()->attention_gqa_saved_bytes(h(), kFp32, s.B, s.T, s.C(), s.NH, s.NKV);
  std::vector<char> probs(static_cast<size_t>(saved));
  std::vector<float> gqa_out(out.size()), gqa_dqkv(dqkv.size(), 0.0f);
  ASSERT_OK(api()->attention_gqa_forward_dt(h(), kFp32, gqa_out.data(), probs.data(), qkv.data(), s.B, s.T, s.C(),
                                            s.NH, s.NKV));
  ASSERT_OK(api()->attention_gqa_backward_dt(h(), kFp32, gqa_dqkv.data(), dout.data(), qkv.data(), gqa_out.data(),
                                             probs.data(), s.B, s.T, s.C(), s.NH, s.NKV));
  expect_close(out, to_double(gqa_out), 1e-6, 1e-5, "out against attention_gqa_forward_dt");
  expect_close(dqkv, to_double(gqa_dqkv), 1e-6, 1e-5, "dqkv against attention_gqa_backward_dt");
}

// Context parallelism's use: the second half's queries over the first half's keys (all visible)
// and over their own (causal), merged by lse, equal the whole row's attention; the backward of
// each block against the merged out and lse adds up to the whole row's gradients.
TEST_F(BackendCpuBlockAttention, BlocksMergedByStatisticsEqualOneBlock) {
  const Shape s{1, 80, 4, 1, 8};
  const int64_t half = s.T / 2, W = s.W(), C = s.C();
  const auto qkv = random_floats(s.B * s.T * W, 6), dout_full = random_floats(s.B * s.T * C, 7);
  std::vector<float> dout(dout_full);
  std::fill(dout.begin(), dout.begin() + half * C, 0.0f);  // only the second half's queries
  const Reference want = naive_attention(s, qkv, nullptr, dout);

  std::vector<float> out_block[2], lse_block[2];
  for (int i = 0; i < 2; ++i) {
    out_block[i].assign(half * C, 0.0f);
    lse_block[i].assign(s.NH * half, 0.0f);
    keel_attention_args a{};
    a.struct_size = sizeof(a);
    a.dt = kFp32;
    a.B = 1, a.Tq = half, a.Tkv = half, a.NH = s.NH, a.NKV = s.NKV, a.hs = s.hs;
    a.q = qkv.data() + half * W, a.q_stride = W, a.q_index0 = half;
    a.kv = qkv.data() + i * half * W + C, a.kv_stride = W, a.kv_index0 = i * half;
    a.out = out_block[i].data(), a.out_stride = C, a.lse = lse_block[i].data();
    ASSERT_OK(api()->attention_block_forward(h(), &a));
  }
  // attention_merge_dt folds the second block's result into the first's.
  std::vector<float> out(out_block[0]), lse(lse_block[0]);
  ASSERT_OK(api()->attention_merge_dt(h(), kFp32, out.data(), C, lse.data(), out_block[1].data(), C,
                                      lse_block[1].data(), 1, half, s.NH, s.hs));
  std::vector<double> want_out(half * C), want_lse(s.NH * half);
  for (int64_t hd = 0; hd < s.NH; ++hd)
    for (int64_t t = 0; t < half; ++t) {
      want_lse[hd * half + t] = want.lse[hd * s.T + half + t];
      for (int64_t d = 0; d < s.hs; ++d) want_out[t * C + hd * s.hs + d] = want.out[(half + t) * C + hd * s.hs + d];
    }
  expect_close(out, want_out, 1e-6, 1e-5, "merged out");
  expect_close(lse, want_lse, 1e-5, 1e-6, "merged lse");

  std::vector<float> dqkv(s.T * W, 0.0f);
  for (int i = 0; i < 2; ++i) {
    keel_attention_args a{};
    a.struct_size = sizeof(a);
    a.dt = kFp32;
    a.B = 1, a.Tq = half, a.Tkv = half, a.NH = s.NH, a.NKV = s.NKV, a.hs = s.hs;
    a.q = qkv.data() + half * W, a.q_stride = W, a.q_index0 = half;
    a.kv = qkv.data() + i * half * W + C, a.kv_stride = W, a.kv_index0 = i * half;
    a.out = out.data(), a.out_stride = C, a.lse = lse.data();
    a.dout = dout.data() + half * C, a.dq = dqkv.data() + half * W, a.dkv = dqkv.data() + i * half * W + C;
    ASSERT_OK(api()->attention_block_backward(h(), &a));
  }
  expect_close(dqkv, want.dqkv, 1e-6, 1e-5, "dqkv from both blocks' backwards");
}

// A block in which a query saw no key (lse -inf) adds nothing to it; two such leave out 0 and lse
// -inf; the order of the two blocks does not matter; bf16 rounds once.
TEST_F(BackendCpuBlockAttention, MergeTakesNothingFromAnEmptyBlock) {
  const int64_t T = 3, NH = 2, hs = 4, C = NH * hs;
  const float inf = std::numeric_limits<float>::infinity();
  const auto a_out = random_floats(T * C, 8), b_out = random_floats(T * C, 9);
  const std::vector<float> a_lse = {0.5f, -inf, 1.0f, -inf, 2.0f, 0.25f}, b_lse = {-inf, -inf, 0.0f, 1.5f, 2.0f, -inf};
  std::vector<float> out(a_out), lse(a_lse);
  for (int64_t hd = 0; hd < NH; ++hd)  // a query that saw no key has out 0
    for (int64_t t = 0; t < T; ++t)
      if (a_lse[hd * T + t] == -inf) std::fill_n(out.begin() + t * C + hd * hs, hs, 0.0f);
  std::vector<float> other(b_out);
  for (int64_t hd = 0; hd < NH; ++hd)
    for (int64_t t = 0; t < T; ++t)
      if (b_lse[hd * T + t] == -inf) std::fill_n(other.begin() + t * C + hd * hs, hs, 0.0f);
  std::vector<float> swapped(other), swapped_lse(b_lse);
  const std::vector<float> first(out);
  ASSERT_OK(api()->attention_merge_dt(h(), kFp32, out.data(), C, lse.data(), other.data(), C, b_lse.data(), 1, T, NH, hs));
  ASSERT_OK(api()->attention_merge_dt(h(), kFp32, swapped.data(), C, swapped_lse.data(), first.data(), C, a_lse.data(),
                                      1, T, NH, hs));
  for (int64_t hd = 0; hd < NH; ++hd)
    for (int64_t t = 0; t < T; ++t) {
      const float la = a_lse[hd * T + t], lb = b_lse[hd * T + t];
      const double l = la == -inf ? lb : lb == -inf ? la : std::log(std::exp(double(la)) + std::exp(double(lb)));
      if (l == -inf) {
        EXPECT_EQ(lse[hd * T + t], -inf) << hd << "," << t;
        EXPECT_EQ(swapped_lse[hd * T + t], -inf) << hd << "," << t;
      } else {
        EXPECT_NEAR(lse[hd * T + t], l, 1e-6) << hd << "," << t;
        EXPECT_NEAR(swapped_lse[hd * T + t], l, 1e-6) << hd << "," << t;
      }
      for (int64_t d = 0; d < hs; ++d) {
        const size_t at = size_t(t * C + hd * hs + d);
        const double want = l == -inf ? 0.0
                                      : (la == -inf ? 0.0 : std::exp(la - l) * first[at]) +
                                            (lb == -inf ? 0.0 : std::exp(lb - l) * other[at]);
        EXPECT_NEAR(out[at], want, 1e-6) << hd << "," << t << "," << d;
        EXPECT_NEAR(swapped[at], want, 1e-6) << hd << "," << t << "," << d;
      }
    }
  const auto b = bf16_values(size_t(T * C), 10), c = bf16_values(size_t(T * C), 11);
  std::vector<float> out32(b.f), lse32(a_lse);
  std::vector<uint16_t> out16(b.h);
  std::vector<float> lse16(a_lse);
  ASSERT_OK(api()->attention_merge_dt(h(), kFp32, out32.data(), C, lse32.data(), c.f.data(), C, b_lse.data(), 1, T, NH, hs));
  ASSERT_OK(api()->attention_merge_dt(h(), kBf16, out16.data(), C, lse16.data(), c.h.data(), C, b_lse.data(), 1, T, NH, hs));
  expect_close(widen(out16), to_double(out32), 0.0, 1.0 / 256, "attention_merge at bf16");
  EXPECT_EQ(api()->attention_merge_dt(h(), kFp32, out32.data(), C - 1, lse32.data(), c.f.data(), C, b_lse.data(), 1, T,
                                      NH, hs),
            KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("attention_merge_dt: a row stride is shorter"), std::string::npos) << g_last_error;
}

// copy_rows_dt: the key/value heads out of fused rows and their gradient added back, against
// element-by-element loops; bf16 rounds the sum once.
TEST_F(BackendCpuBlockAttention, CopyRowsMovesAndAddsStridedRows) {
  const int64_t rows = 7, width = 5, wide = 12, offset = 4;
  const auto fused = random_floats(rows * wide, 12), compact = random_floats(rows * width, 13);
  std::vector<float> out(rows * width, -1.0f);
  ASSERT_OK(api()->copy_rows_dt(h(), kFp32, out.data(), width, fused.data() + offset, wide, rows, width, 0));
  std::vector<float> back(fused);
  ASSERT_OK(api()->copy_rows_dt(h(), kFp32, back.data() + offset, wide, compact.data(), width, rows, width, 1));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < wide; ++c) {
      const size_t at = size_t(r * wide + c);
      const bool inside = c >= offset && c < offset + width;
      if (inside) EXPECT_EQ(out[size_t(r * width + c - offset)], fused[at]);
      EXPECT_EQ(back[at], inside ? fused[at] + compact[size_t(r * width + c - offset)] : fused[at]) << r << "," << c;
    }
  const auto a = bf16_values(size_t(rows * wide), 14), b = bf16_values(size_t(rows * width), 15);
  std::vector<uint16_t> sum16(a.h);
  std::vector<float> sum32(a.f);
  ASSERT_OK(api()->copy_rows_dt(h(), kBf16, sum16.data() + offset, wide, b.h.data(), width, rows, width, 1));
  ASSERT_OK(api()->copy_rows_dt(h(), kFp32, sum32.data() + offset, wide, b.f.data(), width, rows, width, 1));
  expect_close(widen(sum16), to_double(sum32), 0.0, 1.0 / 256, "copy_rows accumulate at bf16");
  EXPECT_EQ(api()->copy_rows_dt(h(), kFp32, out.data(), width - 1, fused.data(), wide, rows, width, 0),
            KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("copy_rows_dt: a row stride is shorter than its width"), std::string::npos) << g_last_error;
}

// A query whose document lies wholly outside the key block sees nothing: out 0, lse -inf, and
// no gradient.
TEST_F(BackendCpuBlockAttention, QueryWithoutVisibleKeysGetsZero) {
  const Shape s{1, 4, 1, 1, 4};
  const auto qkv = random_floats(s.T * s.W(), 8), dout = random_floats(s.T * s.C(), 9);
  const std::vector<int32_t> positions{0, 1, 2, 3};  // one document over the row
  std::vector<float> out(2 * s.C(), 7.0f), lse(2, 7.0f), dqkv(s.T * s.W(), 0.0f);
  keel_attention_args a{};
  a.struct_size = sizeof(a);
  a.dt = kFp32;
  a.B = 1, a.Tq = 2, a.Tkv = 2, a.NH = 1, a.NKV = 1, a.hs = s.hs;
  a.q = qkv.data(), a.q_stride = s.W(), a.q_index0 = 0;  // queries 0, 1 ...
  a.kv = qkv.data() + 2 * s.W() + s.C(), a.kv_stride = s.W(), a.kv_index0 = 2;  // ... against keys 2, 3
  a.out = out.data(), a.out_stride = s.C(), a.lse = lse.data(), a.positions = positions.data();
  ASSERT_OK(api()->attention_block_forward(h(), &a));
  for (float x : out) EXPECT_EQ(x, 0.0f);
  for (float x : lse) EXPECT_EQ(x, -std::numeric_limits<float>::infinity());
  a.dout = dout.data(), a.dq = dqkv.data(), a.dkv = dqkv.data() + 2 * s.W() + s.C();
  ASSERT_OK(api()->attention_block_backward(h(), &a));
  for (float x : dqkv) EXPECT_EQ(x, 0.0f);
}

// bf16 on interleaved q/kv and dq/dkv: within one rounding of the fp32 op on the same values.
TEST_F(BackendCpuBlockAttention, Bf16WithinOneRoundingOfFp32) {
  const Shape s{2, 40, 4, 2, 8};
  const auto qkv = bf16_values(s.B * s.T * s.W(), 10), dout = bf16_values(s.B * s.T * s.C(), 11);
  const auto positions = packed_positions(s, {7, 20, 13});
  std::vector<float> out(s.B * s.T * s.C()), lse(s.B * s.NH * s.T), dqkv(s.B * s.T * s.W(), 0.0f);
  keel_attention_args a = fused_args(s, kFp32, sizeof(float), qkv.f.data(), out.data(), lse.data(), positions.data());
  ASSERT_OK(api()->attention_block_forward(h(), &a));
  set_grads(a, s, sizeof(float), dout.f.data(), dqkv.data());
  ASSERT_OK(api()->attention_block_backward(h(), &a));

  std::vector<uint16_t> out16(out.size()), dqkv16(dqkv.size(), 0);
  std::vector<float> lse16(lse.size());
  keel_attention_args b = fused_args(s, kBf16, 2, qkv.h.data(), out16.data(), lse16.data(), positions.data());
  ASSERT_OK(api()->attention_block_forward(h(), &b));
  // The backward reads the fp32 run's out rounded to bf16: the same inputs the bf16 forward gave.
  set_grads(b, s, 2, dout.h.data(), dqkv16.data());
  ASSERT_OK(api()->attention_block_backward(h(), &b));
  const auto out_wide = widen(out16);
  expect_close(out_wide, to_double(out), 1e-6, 1.0 / 256, "out at bf16");
  expect_close(lse16, to_double(lse), 1e-6, 1e-6, "lse (fp32 at bf16)");
  double scale = 0;
  for (float x : dqkv) scale = std::max(scale, double(std::fabs(x)));
  expect_close(widen(dqkv16), to_double(dqkv), 2e-2 * scale, 1.0 / 64, "dqkv at bf16");
}

// rope at positions: each document turned as rope_forward_dt turns a row starting at 0; the
// backward undoes it.
TEST_F(BackendCpuBlockAttention, RopeAtPositionsTurnsEachDocumentFromZero) {
  const int64_t T = 12, heads = 3, D = 8, stride = heads * D + 4, first = 2;
  const std::vector<int32_t> positions{0, 1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 4};
  std::vector<float> inv_freq(D / 2);
  for (int64_t i = 0; i < D / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / D);
  const auto x = random_floats(T * stride, 12);
  std::vector<float> got(x), want(x);
  ASSERT_OK(api()->rope_at_forward_dt(h(), kFp32, got.data(), inv_freq.data(), positions.data(), 1, T, heads, D,
                                      stride, first));
  for (int64_t t0 = 0; t0 < T;) {  // each document as its own sequence
    int64_t t1 = t0 + 1;
    while (t1 < T && positions[t1] != 0) ++t1;
    ASSERT_OK(api()->rope_forward_dt(h(), kFp32, want.data() + t0 * stride, inv_freq.data(), 1, t1 - t0, heads, D,
                                     stride, first, 0));
    t0 = t1;
  }
  expect_close(got, to_double(want), 0, 0, "rope at positions against rope_forward_dt per document");
  ASSERT_OK(api()->rope_at_backward_dt(h(), kFp32, got.data(), inv_freq.data(), positions.data(), 1, T, heads, D,
                                       stride, first));
  expect_close(got, to_double(x), 1e-6, 1e-6, "the backward turns back");
}

TEST_F(BackendCpuBlockAttention, BadArgumentsAreRefusedNamingTheOp) {
  const Shape s{1, 4, 3, 2, 4};
  std::vector<float> qkv(s.T * s.W()), out(s.T * 16), lse(16);
  keel_attention_args a = fused_args(s, kFp32, sizeof(float), qkv.data(), out.data(), lse.data(), nullptr);
  EXPECT_EQ(api()->attention_block_forward(h(), &a), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("attention_block_forward"), std::string::npos) << g_last_error;
  EXPECT_NE(g_last_error.find("NKV 2"), std::string::npos) << g_last_error;
  a.NH = 4, a.out_stride = 16, a.struct_size = offsetof(keel_attention_args, dout);
  EXPECT_EQ(api()->attention_block_forward(h(), &a), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("struct_size"), std::string::npos) << g_last_error;
  a.struct_size = sizeof(a);
  EXPECT_EQ(api()->attention_block_backward(h(), &a), KEEL_ERR_INVALID_ARGUMENT);  // no dout, dq, dkv
  EXPECT_NE(g_last_error.find("dout, dq and dkv"), std::string::npos) << g_last_error;
}

}  // namespace
