// keel_support/model/stacked_linear.hpp on the cpu backend, fp32 and bf16, with and without
// biases: the stacked matmul against two references, a host double-precision oracle and the parts
// run as separate matmuls on the same backend (what a model would do without the helper), for the
// output, the input gradient and each part's weight and bias gradient; the weight gradients are
// added to what the buffers held, the INPUT-only backward (no gradient buffers) adds dout·W
// alone, the WEIGHT-only one gives the full backward's gradients, and miscounted lists are
// refused with the counts.
#include <keel_support/common/testing/recording_host.hpp>
#include <keel_support/model/stacked_linear.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cpu_backend_plugin.hpp"

namespace {

using keel_support::BackendBuffer;
using keel_support::BackendOps;
using keel_support::ComputeOps;
using keel_support::Elems;
using keel_support::StackedLinear;

const keel_host kHost = keel_support::testing::recording_host();

using keel_test::cpu_backend_api;

// Multiples of 1/64 in [-1, 1]: exact in bf16, so both precisions start from the same numbers.
std::vector<float> values(int64_t n, uint32_t seed) {
  std::vector<float> out(static_cast<size_t>(n));
  uint32_t x = seed * 2654435761u + 1;
  for (float& v : out) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<float>(static_cast<int32_t>((x >> 16) % 129) - 64) / 64.0f;
  }
  return out;
}

struct Case {
  const char* precision;
  bool with_bias;
};

class StackedLinearTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const keel_backend_api* api = cpu_backend_api();
    ASSERT_NE(api, nullptr) << "no cpu backend in " << KEEL_CPU_PLUGIN_PATH;
    const std::string config = std::string("{\"plugin\":\"cpu\",\"precision\":\"") + GetParam().precision + "\"}";
    keel_backend_create_args args{sizeof args, config.c_str(), "backend"};
    ASSERT_EQ(api->create(&kHost, &args, &obj_), KEEL_OK) << keel_support::testing::last_message();
    ops_ = ComputeOps(BackendOps{api, obj_});
    bf16_ = std::string(GetParam().precision) == "bf16";
  }
  void TearDown() override {
    buffers_.clear();
    if (obj_) cpu_backend_api()->destroy(obj_);
  }

  // Backend memory at the compute type holding `host`.
  Elems upload(const std::vector<float>& host) {
    buffers_.push_back(ops_.backend().alloc_bytes(ops_.bytes(int64_t(host.size()))));
    void* data = buffers_.back().get();
    if (!bf16_) {
      std::memcpy(data, host.data(), host.size() * sizeof(float));
    } else {
      auto* bits = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < host.size(); ++i) {
        uint32_t word;
        std::memcpy(&word, &host[i], sizeof word);
        bits[i] = static_cast<uint16_t>(word >> 16);  // exact: values() are bf16 numbers
      }
    }
    return ops_.at(data);
  }
  float* upload_fp32(const std::vector<float>& host) {
    buffers_.push_back(ops_.backend().alloc_bytes(host.size() * sizeof(float)));
    std::memcpy(buffers_.back().get(), host.data(), host.size() * sizeof(float));
    return buffers_.back().floats();
  }
  std::vector<float> download(Elems x, int64_t n) const {
    std::vector<float> out(static_cast<size_t>(n));
    if (!bf16_) {
      std::memcpy(out.data(), x.get(), out.size() * sizeof(float));
      return out;
    }
    const auto* bits = static_cast<const uint16_t*>(x.get());
    for (size_t i = 0; i < out.size(); ++i) {
      const uint32_t word = uint32_t(bits[i]) << 16;
      std::memcpy(&out[i], &word, sizeof word);
    }
    return out;
  }
  // A value at the compute type: fp32 sums agree to rounding; bf16 ones are rounded to 8 bits.
  double tolerance(double expected) const { return bf16_ ? 1e-2 * std::fabs(expected) + 1e-3 : 1e-5; }

  void* obj_ = nullptr;
  ComputeOps ops_;
  bool bf16_ = false;
  std::vector<BackendBuffer> buffers_;
};

// q|k|v of grouped-query attention: 2 query heads and 1 key/value head of width 3.
constexpr int64_t kN = 5, kIn = 8;
const std::vector<int64_t> kRows = {6, 3, 3};
constexpr int64_t kOut = 12;

TEST_P(StackedLinearTest, MatchesTheOracleAndSeparateMatmuls) {
  const bool with_bias = GetParam().with_bias;
  StackedLinear stacked(ops_, kIn, kRows, with_bias);
  ASSERT_EQ(stacked.out_features(), kOut);
  const std::vector<float> inp = values(kN * kIn, 1), dout = values(kN * kOut, 2);
  std::vector<std::vector<float>> w, b;
  for (size_t p = 0; p < kRows.size(); ++p) {
    w.push_back(values(kRows[p] * kIn, 10 + uint32_t(p)));
    b.push_back(with_bias ? values(kRows[p], 20 + uint32_t(p)) : std::vector<float>());
  }
  const Elems inp_d = upload(inp), dout_d = upload(dout);
  std::vector<Elems> w_d, b_d;
  std::vector<float*> dw_d, db_d;
  for (size_t p = 0; p < kRows.size(); ++p) {
    w_d.push_back(upload(w[p]));
    b_d.push_back(with_bias ? upload(b[p]) : Elems());
    // The gradient buffers start at 0.5: the helper adds to them, as a strategy's buffers expect.
    dw_d.push_back(upload_fp32(std::vector<float>(size_t(kRows[p] * kIn), 0.5f)));
    db_d.push_back(with_bias ? upload_fp32(std::vector<float>(size_t(kRows[p]), 0.5f)) : nullptr);
  }
  if (with_bias) stacked.stack({w_d[0], w_d[1], w_d[2]}, {b_d[0], b_d[1], b_d[2]});
  else stacked.stack({w_d[0], w_d[1], w_d[2]});

  const Elems out_d = upload(std::vector<float>(size_t(kN * kOut), 0.0f));
  stacked.forward(out_d, inp_d, kN);
  const Elems dinp_d = upload(std::vector<float>(size_t(kN * kIn), 0.0f));
  if (with_bias) stacked.backward(dinp_d, dout_d, inp_d, kN, {dw_d[0], dw_d[1], dw_d[2]}, {db_d[0], db_d[1], db_d[2]});
  else stacked.backward(dinp_d, dout_d, inp_d, kN, {dw_d[0], dw_d[1], dw_d[2]});
  const std::vector<float> out = download(out_d, kN * kOut), dinp = download(dinp_d, kN * kIn);

  // The oracle, in double: out = inp·Wᵀ + b, dinp = dout·W, dW_p = dout_pᵀ·inp, db_p = Σ_n dout_p.
  std::vector<double> dinp_ref(size_t(kN * kIn), 0.0);
  int64_t col = 0;
  for (size_t p = 0; p < kRows.size(); ++p) {
    const int64_t R = kRows[p];
    // The part alone, as a model without the helper would run it, on the same backend.
    std::vector<float> dout_part(size_t(kN * R));
    for (int64_t n = 0; n < kN; ++n)
      for (int64_t r = 0; r < R; ++r) dout_part[size_t(n * R + r)] = dout[size_t(n * kOut + col + r)];
    const Elems part_out = upload(std::vector<float>(size_t(kN * R), 0.0f));
    ops_.matmul_forward(part_out, inp_d, w_d[p], b_d[p], kN, kIn, R);
    float* part_dw = upload_fp32(std::vector<float>(size_t(R * kIn), 0.5f));
    float* part_db = with_bias ? upload_fp32(std::vector<float>(size_t(R), 0.5f)) : nullptr;
    ops_.matmul_backward(Elems(), part_dw, part_db, upload(dout_part), inp_d, w_d[p], kN, kIn, R);
    const std::vector<float> separate = download(part_out, kN * R);

    for (int64_t n = 0; n < kN; ++n)
      for (int64_t r = 0; r < R; ++r) {
        double sum = with_bias ? b[p][size_t(r)] : 0.0;
        for (int64_t c = 0; c < kIn; ++c) sum += double(inp[size_t(n * kIn + c)]) * w[p][size_t(r * kIn + c)];
        const float got = out[size_t(n * kOut + col + r)];
        EXPECT_NEAR(got, sum, tolerance(sum)) << "out row " << n << ", part " << p << " row " << r;
        EXPECT_NEAR(got, separate[size_t(n * R + r)], tolerance(sum)) << "out vs separate, part " << p;
        for (int64_t c = 0; c < kIn; ++c)
          dinp_ref[size_t(n * kIn + c)] += double(dout_part[size_t(n * R + r)]) * w[p][size_t(r * kIn + c)];
      }
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t c = 0; c < kIn; ++c) {
        double sum = 0.5;
        for (int64_t n = 0; n < kN; ++n) sum += double(dout_part[size_t(n * R + r)]) * inp[size_t(n * kIn + c)];
        const size_t i = size_t(r * kIn + c);
        EXPECT_NEAR(dw_d[p][i], sum, 1e-5) << "dweight of part " << p << " at " << r << "," << c;
        EXPECT_NEAR(dw_d[p][i], part_dw[i], 1e-5) << "dweight vs separate, part " << p;
      }
      if (!with_bias) continue;
      double sum = 0.5;
      for (int64_t n = 0; n < kN; ++n) sum += dout_part[size_t(n * R + r)];
      EXPECT_NEAR(db_d[p][size_t(r)], sum, 1e-5) << "dbias of part " << p << " row " << r;
      EXPECT_NEAR(db_d[p][size_t(r)], part_db[size_t(r)], 1e-5) << "dbias vs separate, part " << p;
    }
    col += R;
  }
  for (size_t i = 0; i < dinp.size(); ++i)
    EXPECT_NEAR(dinp[i], dinp_ref[i], tolerance(dinp_ref[i])) << "dinp element " << i;
}

TEST_P(StackedLinearTest, InputOnlyBackwardAddsTheInputGradient) {
  StackedLinear stacked(ops_, kIn, kRows, GetParam().with_bias);
  std::vector<Elems> w_d;
  for (size_t p = 0; p < kRows.size(); ++p) w_d.push_back(upload(values(kRows[p] * kIn, 30 + uint32_t(p))));
  if (GetParam().with_bias)
    stacked.stack({w_d[0], w_d[1], w_d[2]}, {upload(values(6, 1)), upload(values(3, 2)), upload(values(3, 3))});
  else stacked.stack({w_d[0], w_d[1], w_d[2]});
  const std::vector<float> dout = values(kN * kOut, 4);
  const Elems dinp_d = upload(std::vector<float>(size_t(kN * kIn), 0.25f));
  stacked.backward(dinp_d, upload(dout), upload(values(kN * kIn, 5)), kN);
  const std::vector<float> dinp = download(dinp_d, kN * kIn);
  // dinp is added to: 0.25 + dout·W.
  std::vector<float> w_all;
  for (size_t p = 0; p < kRows.size(); ++p) {
    const std::vector<float> part = values(kRows[p] * kIn, 30 + uint32_t(p));
    w_all.insert(w_all.end(), part.begin(), part.end());
  }
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t c = 0; c < kIn; ++c) {
      double sum = 0.25;
      for (int64_t o = 0; o < kOut; ++o) sum += double(dout[size_t(n * kOut + o)]) * w_all[size_t(o * kIn + c)];
      EXPECT_NEAR(dinp[size_t(n * kIn + c)], sum, tolerance(sum)) << "dinp " << n << "," << c;
    }
}

// A zero-bubble WEIGHT part: no input gradient, the same weight and bias gradients bit for bit as
// the full backward's.
TEST_P(StackedLinearTest, WeightOnlyBackwardGivesTheFullBackwardsGradients) {
  const bool with_bias = GetParam().with_bias;
  StackedLinear stacked(ops_, kIn, kRows, with_bias);
  std::vector<Elems> w_d, b_d;
  for (size_t p = 0; p < kRows.size(); ++p) {
    w_d.push_back(upload(values(kRows[p] * kIn, 40 + uint32_t(p))));
    b_d.push_back(upload(values(kRows[p], 50 + uint32_t(p))));
  }
  if (with_bias) stacked.stack(w_d, b_d);
  else stacked.stack(w_d);
  const Elems inp = upload(values(kN * kIn, 6)), dout = upload(values(kN * kOut, 7));
  auto gradients = [&](bool with_input) {
    std::vector<float*> dw, db;
    for (int64_t rows : kRows) {
      dw.push_back(upload_fp32(std::vector<float>(size_t(rows * kIn), 0.0f)));
      if (with_bias) db.push_back(upload_fp32(std::vector<float>(size_t(rows), 0.0f)));
    }
    const Elems dinp = with_input ? upload(std::vector<float>(size_t(kN * kIn), 0.0f)) : Elems();
    stacked.backward(dinp, dout, inp, kN, dw, db);
    std::vector<float> all;
    for (size_t p = 0; p < kRows.size(); ++p) {
      all.insert(all.end(), dw[p], dw[p] + kRows[p] * kIn);
      if (with_bias) all.insert(all.end(), db[p], db[p] + kRows[p]);
    }
    return all;
  };
  const std::vector<float> full = gradients(true), weight_only = gradients(false);
  ASSERT_EQ(full.size(), weight_only.size());
  for (size_t i = 0; i < full.size(); ++i) EXPECT_EQ(full[i], weight_only[i]) << "gradient element " << i;
}

TEST_P(StackedLinearTest, RefusesListsThatDoNotMatchItsParts) {
  StackedLinear stacked(ops_, kIn, kRows, GetParam().with_bias);
  const Elems w = upload(values(6 * kIn, 1));
  try {
    stacked.stack({w, w});
    FAIL() << "two weights for three parts were taken";
  } catch (const keel_support::StatusError& e) {
    EXPECT_NE(std::string(e.what()).find("2 weights for a stack of 3 parts"), std::string::npos) << e.what();
  }
  float* dw = upload_fp32(std::vector<float>(size_t(6 * kIn), 0.0f));
  const Elems x = upload(values(kN * kIn, 2)), d = upload(values(kN * kOut, 3));
  try {
    stacked.backward(Elems(), d, x, kN, {dw, dw, dw}, {dw});
    FAIL() << "one bias gradient for three parts was taken";
  } catch (const keel_support::StatusError& e) {
    EXPECT_NE(std::string(e.what()).find("1 bias gradients for a stack of 3 parts"), std::string::npos) << e.what();
  }
  EXPECT_THROW(StackedLinear(ops_, kIn, {6, 0}, false), keel_support::StatusError);
  EXPECT_THROW(StackedLinear(ops_, kIn, {}, false), keel_support::StatusError);
}

INSTANTIATE_TEST_SUITE_P(Precisions, StackedLinearTest,
                         ::testing::Values(Case{"fp32", false}, Case{"fp32", true}, Case{"bf16", false},
                                           Case{"bf16", true}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.precision) + (info.param.with_bias ? "_bias" : "_no_bias");
                         });

}  // namespace
