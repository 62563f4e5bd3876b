// keel_support/model/ring_attention.hpp: context parallelism's attention over cp ranks (threads
// behind thread_comm.hpp, each with its own cpu backend) against one rank's attention over the
// whole sequence (attention_block_* over every key at once, itself held to a naive reference in
// backend_block_attention_test.cpp). Each rank holds chunks r and 2·cp−1−r of 2·cp; its out, lse,
// dq and dkv must equal those rows of the one-rank result, at cp 1, 2 and 4, with grouped-query
// heads, fp32 and bf16, round the ring and (fp32: the test comm reduces fp32 only) all gathered;
// the bytes each rank moves equal each exchange's formula.
#include <keel_support/common/testing/recording_host.hpp>
#include <keel_support/model/ring_attention.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu_backend_plugin.hpp"
#include "thread_comm.hpp"

namespace {

using keel_support::BackendBuffer;
using keel_support::BackendOps;
using keel_support::ComputeOps;
using keel_support::Elems;
using keel_support::RingAttention;

const keel_host kHost = keel_support::testing::recording_host();

using keel_test::cpu_backend_api;

// Multiples of 1/64 in [-1, 1]: exact in bf16, so both precisions start from the same numbers.
std::vector<float> values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(-64, 64);
  std::vector<float> out(n);
  for (float& v : out) v = float(pick(rng)) / 64.0f;
  return out;
}

// One cpu backend at a precision, with host <-> backend copies at its compute type.
class Backend {
 public:
  explicit Backend(const std::string& precision) : bf16_(precision == "bf16") {
    const std::string config = "{\"plugin\":\"cpu\",\"precision\":\"" + precision + "\"}";
    keel_backend_create_args args{sizeof args, config.c_str(), "backend"};
    if (cpu_backend_api()->create(&kHost, &args, &obj_) != KEEL_OK) throw std::runtime_error("cpu backend create");
    ops_ = ComputeOps(BackendOps{cpu_backend_api(), obj_});
  }
  ~Backend() {
    buffers_.clear();
    cpu_backend_api()->destroy(obj_);
  }
  const ComputeOps& ops() const { return ops_; }
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
  float* floats(size_t n) {
    buffers_.push_back(ops_.backend().alloc_bytes(n * sizeof(float)));
    return buffers_.back().floats();
  }
  std::vector<float> download(Elems x, size_t n) const {
    std::vector<float> out(n);
    if (!bf16_) {
      std::memcpy(out.data(), x.get(), n * sizeof(float));
      return out;
    }
    const auto* bits = static_cast<const uint16_t*>(x.get());
    for (size_t i = 0; i < n; ++i) {
      const uint32_t word = uint32_t(bits[i]) << 16;
      std::memcpy(&out[i], &word, sizeof word);
    }
    return out;
  }

 private:
  bool bf16_;
  void* obj_ = nullptr;
  ComputeOps ops_;
  std::vector<BackendBuffer> buffers_;
};

struct Problem {
  int64_t B = 2, T = 0, NH = 4, NKV = 2, hs = 8;
  int64_t C() const { return NH * hs; }
  int64_t KV() const { return 2 * NKV * hs; }
  std::vector<float> q, kv, dout;
};

struct Result {
  std::vector<float> out, lse, dq, dkv;  // out, dq (B,T,·); lse (B,NH,T); dkv (B,T,KV)
};

// One rank over the whole sequence: every query against every key at once.
Result whole(const Problem& p, const std::string& precision) {
  Backend be(precision);
  const ComputeOps& ops = be.ops();
  const Elems q = be.upload(p.q), kv = be.upload(p.kv), dout = be.upload(p.dout);
  const Elems out = be.upload(std::vector<float>(size_t(p.B * p.T * p.C())));
  const Elems dq = be.upload(std::vector<float>(size_t(p.B * p.T * p.C())));
  const Elems dkv = be.upload(std::vector<float>(size_t(p.B * p.T * p.KV())));
  float* lse = be.floats(size_t(p.B * p.NH * p.T));
  keel_attention_args a{};
  a.B = p.B, a.Tq = p.T, a.Tkv = p.T, a.NH = p.NH, a.NKV = p.NKV, a.hs = p.hs;
  a.q = q.get(), a.q_stride = p.C(), a.kv = kv.get(), a.kv_stride = p.KV();
  a.out = out.get(), a.out_stride = p.C(), a.lse = lse;
  ops.attention_block_forward(a);
  a.dout = dout.get(), a.dq = dq.get(), a.dkv = dkv.get();
  ops.attention_block_backward(a);
  Result r;
  r.out = be.download(out, size_t(p.B * p.T * p.C()));
  r.lse.assign(lse, lse + p.B * p.NH * p.T);
  r.dq = be.download(dq, size_t(p.B * p.T * p.C()));
  r.dkv = be.download(dkv, size_t(p.B * p.T * p.KV()));
  return r;
}

// Rows of a (B,T,width) tensor for rank r's two chunks, chunk-major: (2,B,Tc,width).
std::vector<float> local_rows(const std::vector<float>& x, int64_t B, int64_t T, int64_t width, int32_t rank,
                              int32_t cp) {
  const int64_t Tc = T / (2 * cp);
  std::vector<float> out;
  for (int32_t which = 0; which < 2; ++which)
    for (int64_t b = 0; b < B; ++b) {
      const int64_t t0 = keel_support::context_chunk(rank, cp, which) * Tc;
      out.insert(out.end(), x.begin() + (b * T + t0) * width, x.begin() + (b * T + t0 + Tc) * width);
    }
  return out;
}

// lse (B,NH,T) rows for rank r: (2,B,NH,Tc).
std::vector<float> local_stats(const std::vector<float>& lse, int64_t B, int64_t NH, int64_t T, int32_t rank,
                               int32_t cp) {
  const int64_t Tc = T / (2 * cp);
  std::vector<float> out;
  for (int32_t which = 0; which < 2; ++which)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < NH; ++h) {
        const int64_t t0 = keel_support::context_chunk(rank, cp, which) * Tc;
        out.insert(out.end(), lse.begin() + (b * NH + h) * T + t0, lse.begin() + (b * NH + h) * T + t0 + Tc);
      }
  return out;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::fabs(got[i] - want[i])));
  EXPECT_LE(worst, tolerance) << what << ": largest difference " << worst;
}

struct Case {
  int32_t cp;
  const char* precision;
  keel_support::KvExchange exchange = keel_support::KvExchange::ring;
};

class RingAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(RingAttentionTest, EachRankEqualsItsRowsOfOneRanksAttention) {
  ASSERT_NE(cpu_backend_api(), nullptr) << "no cpu backend in " << KEEL_CPU_PLUGIN_PATH;
  const int32_t cp = GetParam().cp;
  const std::string precision = GetParam().precision;
  const bool bf16 = precision == "bf16";
  Problem p;
  p.T = 2 * cp * 5;  // chunks of 5 tokens
  p.q = values(size_t(p.B * p.T * p.C()), 1);
  p.kv = values(size_t(p.B * p.T * p.KV()), 2);
  p.dout = values(size_t(p.B * p.T * p.C()), 3);
  const Result want = whole(p, precision);
  // fp32: the same sums in another order; bf16: the merges round out once per block.
  const double value_tol = bf16 ? 3e-2 : 2e-6, grad_tol = bf16 ? 6e-2 : 5e-6;

  keel_test::ThreadWorld world(cp);
  world.run([&](int32_t r) {
    Backend be(precision);
    RingAttention ring(be.ops(), world.api(), world.comm(r), r, cp, GetParam().exchange);
    const bool ring_exchange = GetParam().exchange == keel_support::KvExchange::ring;
    RingAttention::Shape s;
    s.B = p.B, s.Tc = p.T / (2 * cp), s.NH = p.NH, s.NKV = p.NKV, s.hs = p.hs, s.q_stride = p.C(), s.out_stride = p.C();
    const Elems q = be.upload(local_rows(p.q, p.B, p.T, p.C(), r, cp));
    const Elems kv = be.upload(local_rows(p.kv, p.B, p.T, p.KV(), r, cp));
    const Elems dout = be.upload(local_rows(p.dout, p.B, p.T, p.C(), r, cp));
    const size_t rows = size_t(2 * p.B * s.Tc);
    const Elems out = be.upload(std::vector<float>(rows * size_t(p.C())));
    const Elems dq = be.upload(std::vector<float>(rows * size_t(p.C())));
    const Elems dkv = be.upload(std::vector<float>(rows * size_t(p.KV())));
    float* lse = be.floats(size_t(2 * p.B * p.NH * s.Tc));
    ring.forward(s, q, kv, out, lse);
    const keel_comm_counters after_forward = keel_test::ThreadWorld::counters_of(world.comm(r));
    ring.backward(s, q, kv, out, lse, dout, dq, dkv);
    const keel_comm_counters after_backward = keel_test::ThreadWorld::counters_of(world.comm(r));
    const std::string at = "rank " + std::to_string(r) + " of " + std::to_string(cp) + " (" + precision + ")";
    expect_near(be.download(out, rows * size_t(p.C())), local_rows(want.out, p.B, p.T, p.C(), r, cp), value_tol,
                at + " out");
    expect_near(std::vector<float>(lse, lse + 2 * p.B * p.NH * s.Tc), local_stats(want.lse, p.B, p.NH, p.T, r, cp),
                bf16 ? 2e-2 : 2e-6, at + " lse");
    expect_near(be.download(dq, rows * size_t(p.C())), local_rows(want.dq, p.B, p.T, p.C(), r, cp), grad_tol, at + " dq");
    expect_near(be.download(dkv, rows * size_t(p.KV())), local_rows(want.dkv, p.B, p.T, p.KV(), r, cp), grad_tol,
                at + " dkv");
    // The ring's traffic: forward passes the key/value chunks cp−1 times; backward passes them
    // cp−1 times again and their gradient cp times (its last hop takes it home).
    const uint64_t block = uint64_t(RingAttention::step_elements(s)) * be.ops().bytes(1);
    const uint64_t forward_sent = after_forward.bytes[KEEL_COMM_SEND];
    if (ring_exchange) {
      EXPECT_EQ(forward_sent, cp == 1 ? 0 : uint64_t(cp - 1) * block) << at;
      EXPECT_EQ(after_backward.bytes[KEEL_COMM_SEND] - forward_sent, cp == 1 ? 0 : uint64_t(2 * cp - 1) * block) << at;
    } else {  // the test comm counts an all_gather's output and a reduce_scatter's input
      EXPECT_EQ(after_backward.bytes[KEEL_COMM_SEND], 0u) << at;
      EXPECT_EQ(after_forward.bytes[KEEL_COMM_ALL_GATHER], uint64_t(cp) * block) << at;
      EXPECT_EQ(after_backward.bytes[KEEL_COMM_ALL_GATHER], 2 * uint64_t(cp) * block) << at;
      EXPECT_EQ(after_backward.bytes[KEEL_COMM_REDUCE_SCATTER], uint64_t(cp) * block) << at;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Layouts, RingAttentionTest,
                         ::testing::Values(Case{1, "fp32"}, Case{2, "fp32"}, Case{4, "fp32"}, Case{2, "bf16"},
                                           Case{4, "bf16"}, Case{2, "fp32", keel_support::KvExchange::all_gather},
                                           Case{4, "fp32", keel_support::KvExchange::all_gather}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const bool gathered = info.param.exchange == keel_support::KvExchange::all_gather;
                           return "cp" + std::to_string(info.param.cp) + "_" + info.param.precision +
                                  (gathered ? "_all_gather" : "");
                         });

}  // namespace
