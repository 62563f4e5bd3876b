// Self-test of thread_comm.hpp: every collective, split and point-to-point on P = 1..4 ranks,
// with values that differ per rank, and the counters by comm.h's convention.
#include <gtest/gtest.h>

#include <numeric>

#include "thread_comm.hpp"

namespace keel_test {
namespace {

constexpr keel_dtype kF32 = {KEEL_DTYPE_FLOAT, 32, 1};
constexpr keel_dtype kI32 = {KEEL_DTYPE_INT, 32, 1};

class ThreadCommTest : public ::testing::TestWithParam<int32_t> {
 protected:
  int32_t P() const { return GetParam(); }
  ThreadWorld world{GetParam()};
  const keel_comm_api& api = *world.api();
};

// Bytes counted for an operation, or 0 in a group of one (comm.h: nothing is counted there).
uint64_t expected_bytes(int32_t p, uint64_t bytes) { return p == 1 ? 0 : bytes; }
uint64_t expected_calls(int32_t p, uint64_t calls) { return p == 1 ? 0 : calls; }

TEST_P(ThreadCommTest, RankAndSize) {
  world.run([&](int32_t r) {
    int32_t rank = -1, size = -1;
    ASSERT_EQ(api.rank(world.comm(r), &rank), KEEL_OK);
    ASSERT_EQ(api.size(world.comm(r), &size), KEEL_OK);
    EXPECT_EQ(rank, r);
    EXPECT_EQ(size, P());
  });
}

TEST_P(ThreadCommTest, AllReduceSumAndMaxInFloatAndInt) {
  world.run([&](int32_t r) {
    void* c = world.comm(r);
    std::vector<float> x = {1.0f + r, 10.0f * r, -static_cast<float>(r)};
    std::vector<float> sum(3);
    ASSERT_EQ(api.all_reduce(c, x.data(), sum.data(), 3, kF32, KEEL_REDUCE_SUM, nullptr), KEEL_OK);
    const float ranks = P() * (P() - 1) / 2.0f;
    EXPECT_EQ(sum, (std::vector<float>{P() + ranks, 10.0f * ranks, -ranks}));
    ASSERT_EQ(api.all_reduce(c, x.data(), x.data(), 3, kF32, KEEL_REDUCE_MAX, nullptr), KEEL_OK);  // in place
    EXPECT_EQ(x, (std::vector<float>{float(P()), 10.0f * (P() - 1), 0.0f}));
    std::vector<int32_t> k = {r, 100 - r};
    ASSERT_EQ(api.all_reduce(c, k.data(), k.data(), 2, kI32, KEEL_REDUCE_SUM, nullptr), KEEL_OK);
    EXPECT_EQ(k, (std::vector<int32_t>{P() * (P() - 1) / 2, 100 * P() - P() * (P() - 1) / 2}));
    const keel_comm_counters n = ThreadWorld::counters_of(c);
    EXPECT_EQ(n.calls[KEEL_COMM_ALL_REDUCE], expected_calls(P(), 3));
    EXPECT_EQ(n.bytes[KEEL_COMM_ALL_REDUCE], expected_bytes(P(), 2 * (12 + 12 + 8)));
  });
}

TEST_P(ThreadCommTest, AllReduceSumsInRankOrder) {
  // Floating-point addition is not associative: every rank must get the same bits.
  std::vector<float> results(static_cast<size_t>(P()));
  world.run([&](int32_t r) {
    float x = r == 0 ? 1e8f : (r % 2 ? 1.0f : -1e8f);
    ASSERT_EQ(api.all_reduce(world.comm(r), &x, &x, 1, kF32, KEEL_REDUCE_SUM, nullptr), KEEL_OK);
    results[static_cast<size_t>(r)] = x;
  });
  float expected = 1e8f;
  for (int32_t r = 1; r < P(); ++r) expected += r % 2 ? 1.0f : -1e8f;
  for (float v : results) EXPECT_EQ(v, expected);
}

TEST_P(ThreadCommTest, ReduceScatterGivesEachRankItsBlock) {
  world.run([&](int32_t r) {
    void* c = world.comm(r);
    std::vector<float> send(static_cast<size_t>(2 * P()));
    for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<float>(i) + 100.0f * r;
    std::vector<float> recv(2);
    ASSERT_EQ(api.reduce_scatter(c, send.data(), recv.data(), 2, kF32, KEEL_REDUCE_SUM, nullptr), KEEL_OK);
    const float ranks = 100.0f * P() * (P() - 1) / 2;
    EXPECT_EQ(recv, (std::vector<float>{P() * float(2 * r) + ranks, P() * float(2 * r + 1) + ranks}));
    const keel_comm_counters n = ThreadWorld::counters_of(c);
    EXPECT_EQ(n.bytes[KEEL_COMM_REDUCE_SCATTER], expected_bytes(P(), 2 * 4 * P()));  // its input bytes
  });
}

TEST_P(ThreadCommTest, AllGatherConcatenatesInRankOrder) {
  world.run([&](int32_t r) {
    void* c = world.comm(r);
    int32_t mine[2] = {r, -r};
    std::vector<int32_t> all(static_cast<size_t>(2 * P()));
    ASSERT_EQ(api.all_gather(c, mine, all.data(), 2, kI32, nullptr), KEEL_OK);
    for (int32_t q = 0; q < P(); ++q) {
      EXPECT_EQ(all[size_t(2 * q)], q);
      EXPECT_EQ(all[size_t(2 * q + 1)], -q);
    }
    EXPECT_EQ(ThreadWorld::counters_of(c).bytes[KEEL_COMM_ALL_GATHER], expected_bytes(P(), 8 * P()));  // output
  });
}

TEST_P(ThreadCommTest, BroadcastCopiesTheRootsBufferAndCountsOnEveryRank) {
  world.run([&](int32_t r) {
    void* c = world.comm(r);
    const int32_t root = P() - 1;
    std::vector<float> x = {float(r), float(r) + 0.5f};
    ASSERT_EQ(api.broadcast(c, x.data(), 2, kF32, root, nullptr), KEEL_OK);
    EXPECT_EQ(x, (std::vector<float>{float(root), float(root) + 0.5f}));
    EXPECT_EQ(ThreadWorld::counters_of(c).bytes[KEEL_COMM_BROADCAST], expected_bytes(P(), 8));
  });
}

TEST_P(ThreadCommTest, SendRecvRingWithNonBlockingRecvFirst) {
  world.run([&](int32_t r) {
    void* c = world.comm(r);
    const int32_t next = (r + 1) % P(), prev = (r + P() - 1) % P();
    float out[3] = {float(r), float(r) * 2, 7.0f}, in[3] = {};
    keel_comm_request* request = nullptr;
    ASSERT_EQ(api.recv(c, in, 3, kF32, prev, 5, &request), KEEL_OK);  // posted before the send
    ASSERT_EQ(api.send(c, out, 3, kF32, next, 5, nullptr), KEEL_OK);
    ASSERT_EQ(api.wait(c, request), KEEL_OK);
    EXPECT_EQ(in[0], float(prev));
    EXPECT_EQ(in[1], float(prev) * 2);
    const keel_comm_counters n = ThreadWorld::counters_of(c);
    EXPECT_EQ(n.bytes[KEEL_COMM_SEND], expected_bytes(P(), 12));
    EXPECT_EQ(n.bytes[KEEL_COMM_RECV], expected_bytes(P(), 12));
  });
}

TEST_P(ThreadCommTest, TagsKeepMessagesApart) {
  if (P() < 2) GTEST_SKIP() << "needs two ranks";
  world.run([&](int32_t r) {
    void* c = world.comm(r);
    if (r == 0) {
      int32_t a = 1, b = 2;
      ASSERT_EQ(api.send(c, &a, 1, kI32, 1, 10, nullptr), KEEL_OK);
      ASSERT_EQ(api.send(c, &b, 1, kI32, 1, 20, nullptr), KEEL_OK);
    } else if (r == 1) {
      int32_t b = 0, a = 0;
      ASSERT_EQ(api.recv(c, &b, 1, kI32, 0, 20, nullptr), KEEL_OK);
      ASSERT_EQ(api.recv(c, &a, 1, kI32, 0, 10, nullptr), KEEL_OK);
      EXPECT_EQ(a, 1);
      EXPECT_EQ(b, 2);
    }
  });
}

TEST_P(ThreadCommTest, NonBlockingCollectivesCompleteAtWait) {
  world.run([&](int32_t r) {
    void* c = world.comm(r);
    float x = 1.0f;
    keel_comm_request* request = nullptr;
    ASSERT_EQ(api.all_reduce(c, &x, &x, 1, kF32, KEEL_REDUCE_SUM, &request), KEEL_OK);
    ASSERT_NE(request, nullptr);
    ASSERT_EQ(api.wait(c, request), KEEL_OK);
    EXPECT_EQ(x, float(P()));
  });
}

TEST_P(ThreadCommTest, SplitGroupsByColorOrderedByKey) {
  world.run([&](int32_t r) {
    void* sub = nullptr;
    // Two colors (even, odd ranks), ordered by descending world rank.
    ASSERT_EQ(api.split(world.comm(r), r % 2, -r, &sub), KEEL_OK);
    ASSERT_NE(sub, nullptr);
    int32_t rank = -1, size = -1;
    api.rank(sub, &rank);
    api.size(sub, &size);
    const int32_t same_color = (P() - r % 2 + 1) / 2;
    EXPECT_EQ(size, same_color);
    EXPECT_EQ(rank, (same_color - 1) - r / 2);
    int32_t sum = r;
    ASSERT_EQ(api.all_reduce(sub, &sum, &sum, 1, kI32, KEEL_REDUCE_SUM, nullptr), KEEL_OK);
    int32_t expected = 0;
    for (int32_t q = r % 2; q < P(); q += 2) expected += q;
    EXPECT_EQ(sum, expected);
    api.destroy(sub);
  });
}

TEST_P(ThreadCommTest, BarrierCountsCallsButNoBytes) {
  world.run([&](int32_t r) {
    ASSERT_EQ(api.barrier(world.comm(r)), KEEL_OK);
    const keel_comm_counters n = ThreadWorld::counters_of(world.comm(r));
    EXPECT_EQ(n.calls[KEEL_COMM_BARRIER], expected_calls(P(), 1));
    EXPECT_EQ(n.bytes[KEEL_COMM_BARRIER], 0u);
  });
}

TEST_P(ThreadCommTest, InjectedFailureFailsEveryRankWithTheMessage) {
  world.fail_calls(KEEL_COMM_ALL_REDUCE, "link down");
  world.run([&](int32_t r) {
    float x = 1.0f;
    EXPECT_EQ(api.all_reduce(world.comm(r), &x, &x, 1, kF32, KEEL_REDUCE_SUM, nullptr), KEEL_ERR_IO);
  });
  world.fail_calls(KEEL_COMM_ALL_REDUCE, "");
  world.run([&](int32_t r) {
    float x = 1.0f;
    EXPECT_EQ(api.all_reduce(world.comm(r), &x, &x, 1, kF32, KEEL_REDUCE_SUM, nullptr), KEEL_OK);
  });
}

TEST_P(ThreadCommTest, AbortWorldRecordsAndThrowsAndReleasesWaitingRanks) {
  EXPECT_THROW(world.run([&](int32_t r) {
    if (r == 0) api.abort_world(world.comm(r), 3, "rank 0 gave up");
    else api.barrier(world.comm(r));  // must return, not hang
  }),
               ThreadWorldAborted);
  EXPECT_EQ(world.abort_reasons(), std::vector<std::string>{"rank 0 gave up"});
}

INSTANTIATE_TEST_SUITE_P(Ranks, ThreadCommTest, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int32_t>& info) { return "P" + std::to_string(info.param); });

}  // namespace
}  // namespace keel_test
