// comm.h's all_to_all_v on the thread comm (P = 1..4 ranks) and keel_support/comm/all_to_all.hpp's
// counts-then-payload exchange, against a naive reference: rank s sends rank d count(s, d)
// elements valued 1000 s + 100 d + i, uneven and often zero, one rank sending nothing at all.
// Also the counters' bytes by comm.h's rule, the refusals' numbers, and the shared count checks
// the comm plugins use (keel_support/comm/comm_state.hpp).
#include <gtest/gtest.h>

#include <keel_support/comm/all_to_all.hpp>
#include <keel_support/comm/comm_state.hpp>
#include <keel_support/common/testing/host_memory_backend.hpp>
#include <keel_support/common/testing/recording_host.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "thread_comm.hpp"

namespace keel_test {
namespace {

constexpr keel_dtype kF32 = {KEEL_DTYPE_FLOAT, 32, 1};

// Uneven, with zeros; rank 1 sends nothing to anyone (it still takes part).
size_t count(int32_t from, int32_t to) { return from == 1 ? 0 : size_t((3 * from + 5 * to + 1) % 4); }
float value(int32_t from, int32_t to, size_t i) { return float(1000 * from + 100 * to) + float(i); }

std::vector<size_t> send_counts_of(int32_t rank, int32_t size) {
  std::vector<size_t> counts;
  for (int32_t to = 0; to < size; ++to) counts.push_back(count(rank, to));
  return counts;
}
std::vector<size_t> recv_counts_of(int32_t rank, int32_t size) {
  std::vector<size_t> counts;
  for (int32_t from = 0; from < size; ++from) counts.push_back(count(from, rank));
  return counts;
}
std::vector<float> send_buffer_of(int32_t rank, int32_t size) {
  std::vector<float> send;
  for (int32_t to = 0; to < size; ++to)
    for (size_t i = 0; i < count(rank, to); ++i) send.push_back(value(rank, to, i));
  return send;
}
// The naive reference: what rank `rank` must hold after the exchange.
std::vector<float> expected_recv_of(int32_t rank, int32_t size) {
  std::vector<float> recv;
  for (int32_t from = 0; from < size; ++from)
    for (size_t i = 0; i < count(from, rank); ++i) recv.push_back(value(from, rank, i));
  return recv;
}
// comm.h: the bytes this rank sends to the others; nothing in a group of one.
uint64_t bytes_to_others(int32_t rank, int32_t size) {
  uint64_t bytes = 0;
  for (int32_t to = 0; to < size; ++to)
    if (to != rank) bytes += count(rank, to) * sizeof(float);
  return size == 1 ? 0 : bytes;
}

class AllToAllTest : public ::testing::TestWithParam<int32_t> {
 protected:
  int32_t P() const { return GetParam(); }
  ThreadWorld world{GetParam()};
  const keel_comm_api& api = *world.api();
};

TEST_P(AllToAllTest, ValuesEqualTheNaiveReference) {
  world.run([&](int32_t r) {
    const std::vector<size_t> send_counts = send_counts_of(r, P()), recv_counts = recv_counts_of(r, P());
    const std::vector<float> send = send_buffer_of(r, P()), expected = expected_recv_of(r, P());
    std::vector<float> recv(expected.size(), -1.0f);
    ASSERT_EQ(api.all_to_all_v(world.comm(r), send.data(), send_counts.data(), recv.data(), recv_counts.data(), kF32,
                               nullptr),
              KEEL_OK);
    EXPECT_EQ(recv, expected) << "rank " << r << " of " << P();
  });
}

TEST_P(AllToAllTest, CountersCountTheBytesSentToTheOthers) {
  world.run([&](int32_t r) {
    const std::vector<size_t> send_counts = send_counts_of(r, P()), recv_counts = recv_counts_of(r, P());
    const std::vector<float> send = send_buffer_of(r, P());
    std::vector<float> recv(expected_recv_of(r, P()).size());
    keel_comm_request* pending = nullptr;  // the non-blocking form counts alike
    for (keel_comm_request** out : {static_cast<keel_comm_request**>(nullptr), &pending}) {
      ASSERT_EQ(api.all_to_all_v(world.comm(r), send.data(), send_counts.data(), recv.data(), recv_counts.data(), kF32,
                                 out),
                KEEL_OK);
      if (out) ASSERT_EQ(api.wait(world.comm(r), pending), KEEL_OK);
    }
    const keel_comm_counters n = ThreadWorld::counters_of(world.comm(r));
    EXPECT_EQ(n.all_to_all_calls, P() == 1 ? 0u : 2u);
    EXPECT_EQ(n.all_to_all_bytes, 2 * bytes_to_others(r, P())) << "rank " << r;
    for (int op = 0; op < KEEL_COMM_OP_COUNT; ++op) EXPECT_EQ(n.calls[op], 0u) << "op " << op;
  });
}

// Counts first, then the payload, in host memory and staged through a backend's memory; then the
// way back with the counts swapped returns every element to where it started.
TEST_P(AllToAllTest, HelperExchangesCountsThenPayloadAndBack) {
  for (bool through_backend : {false, true}) {
    world.run([&](int32_t r) {
      keel_support::testing::HostMemoryBackend memory;
      const keel_backend_api backend_api = keel_support::testing::HostMemoryBackend::table();
      keel_support::AllToAllGroup group{&api, world.comm(r), {}};
      if (through_backend) group.backend = keel_support::BackendOps{&backend_api, &memory};
      const std::vector<size_t> send_counts = send_counts_of(r, P());
      const std::vector<float> send = send_buffer_of(r, P());
      std::vector<float> recv;
      int allocations = 0;
      const std::vector<size_t> recv_counts =
          keel_support::all_to_all_with_counts(group, send.data(), send_counts, kF32, [&](size_t total) {
            ++allocations;
            recv.assign(total, -1.0f);
            return recv.data();
          });
      EXPECT_EQ(allocations, 1);
      EXPECT_EQ(recv_counts, recv_counts_of(r, P())) << "rank " << r;
      EXPECT_EQ(recv, expected_recv_of(r, P())) << "rank " << r;
      std::vector<float> back(send.size(), -1.0f);
      keel_support::all_to_all_v(group, recv.data(), recv_counts, back.data(), send_counts, kF32);
      EXPECT_EQ(back, send) << "rank " << r;
      EXPECT_EQ(memory.live_allocations, 0);
    });
  }
}

TEST_P(AllToAllTest, CountsBeyondThirtyTwoBitsTravelWhole) {
  world.run([&](int32_t r) {
    keel_support::AllToAllGroup group{&api, world.comm(r), {}};
    std::vector<size_t> send_counts;
    for (int32_t to = 0; to < P(); ++to) send_counts.push_back((size_t(r + 1) << 33) + size_t(to) * 7 + 0xffffffffu);
    const std::vector<size_t> recv_counts = keel_support::exchange_counts(group, send_counts);
    for (int32_t from = 0; from < P(); ++from)
      EXPECT_EQ(recv_counts[size_t(from)], (size_t(from + 1) << 33) + size_t(r) * 7 + 0xffffffffu);
  });
}

// Rank 2 of 4 neither sends nor receives (its experts got no tokens) and still calls; the others
// exchange around it, and its recv buffer may be NULL.
TEST(AllToAllIdleRank, ARankWithNothingToSendOrReceiveStillTakesPart) {
  ThreadWorld world(4);
  auto idle_count = [](int32_t from, int32_t to) { return from == 2 || to == 2 ? size_t(0) : size_t(from + to + 1); };
  world.run([&](int32_t r) {
    keel_support::AllToAllGroup group{world.api(), world.comm(r), {}};
    std::vector<size_t> send_counts;
    std::vector<float> send, expected;
    for (int32_t peer = 0; peer < 4; ++peer) {
      send_counts.push_back(idle_count(r, peer));
      for (size_t i = 0; i < idle_count(r, peer); ++i) send.push_back(value(r, peer, i));
      for (size_t i = 0; i < idle_count(peer, r); ++i) expected.push_back(value(peer, r, i));
    }
    std::vector<float> recv;
    const std::vector<size_t> recv_counts =
        keel_support::all_to_all_with_counts(group, send.data(), send_counts, kF32, [&](size_t total) {
          recv.resize(total);
          return total ? static_cast<void*>(recv.data()) : nullptr;
        });
    EXPECT_EQ(recv, expected) << "rank " << r;
    if (r == 2) EXPECT_EQ(recv_counts, (std::vector<size_t>{0, 0, 0, 0}));
    const keel_comm_counters n = ThreadWorld::counters_of(world.comm(r));
    EXPECT_EQ(n.all_to_all_calls, 2u);  // the counts, then the payload, on every rank
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, AllToAllTest, ::testing::Values(1, 2, 3, 4));

// A recv count that disagrees with what the peer sends is refused on the rank that expects it,
// naming both ranks and both numbers; the other rank's exchange completes.
TEST(AllToAllRefusals, RecvCountDisagreeingWithThePeersSendNamesTheNumbers) {
  const keel_host host = keel_support::testing::recording_host();
  ThreadWorld world(2, &host);
  std::vector<keel_status> status(2);
  std::string rank0_error;
  world.run([&](int32_t r) {
    const std::vector<size_t> send_counts = {1, 2}, recv_counts = r == 0 ? std::vector<size_t>{1, 3}
                                                                          : std::vector<size_t>{2, 2};
    std::vector<float> send(3, 1.0f), recv(4);
    status[size_t(r)] = world.api()->all_to_all_v(world.comm(r), send.data(), send_counts.data(), recv.data(),
                                                  recv_counts.data(), kF32, nullptr);
    if (r == 0) rank0_error = keel_support::testing::last_message();  // kept per thread
  });
  EXPECT_EQ(status[0], KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(status[1], KEEL_OK);
  EXPECT_NE(rank0_error.find("rank 1 sends 1 elements to rank 0, which expects 3"), std::string::npos) << rank0_error;
}

TEST(AllToAllRefusals, SharedChecksNameTheOverflowAndTheSelfMismatch) {
  using keel_support::checked_all_to_all_counts;
  const size_t huge[2] = {SIZE_MAX / 4, 1}, fine[2] = {3, 4};
  try {
    checked_all_to_all_counts(huge, fine, 2, 0, 4, "all_to_all_v");
    ADD_FAILURE() << "an overflowing total was accepted";
  } catch (const keel_support::StatusError& e) {
    EXPECT_EQ(e.code, KEEL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("send_counts overflow: " + std::to_string(SIZE_MAX / 4) +
                                         " elements before rank 1 plus its 1 exceed " + std::to_string(SIZE_MAX / 4)),
              std::string::npos)
        << e.what();
  }
  const size_t other[2] = {3, 5};
  try {
    checked_all_to_all_counts(fine, other, 2, 1, 4, "all_to_all_v");
    ADD_FAILURE() << "a self block of two sizes was accepted";
  } catch (const keel_support::StatusError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 sends itself 4 elements (send_counts[1]) but expects 5"),
              std::string::npos)
        << e.what();
  }
  const auto counts = checked_all_to_all_counts(fine, other, 2, 0, 4, "all_to_all_v");
  EXPECT_EQ(counts.send_offsets, (std::vector<size_t>{0, 3, 7}));
  EXPECT_EQ(counts.recv_offsets, (std::vector<size_t>{0, 3, 8}));
  EXPECT_EQ(counts.send_bytes, 28u);
  EXPECT_EQ(counts.recv_bytes, 32u);
  EXPECT_EQ(counts.bytes_to_others, 16u);  // rank 0 sends 4 elements to rank 1
}

TEST(AllToAllRefusals, ACommWithoutTheSlotIsRefusedByName) {
  keel_comm_api old_comm = *ThreadWorld(1).api();
  old_comm.struct_size = offsetof(keel_comm_api, all_to_all_v);  // a comm built against 0.18
  try {
    keel_support::require_all_to_all_v(&old_comm, "expert parallelism");
    ADD_FAILURE() << "a comm without all_to_all_v was accepted";
  } catch (const keel_support::StatusError& e) {
    EXPECT_EQ(e.code, KEEL_ERR_UNIMPLEMENTED);
    EXPECT_NE(std::string(e.what()).find("expert parallelism needs the comm's all_to_all_v (appended in ABI 0.19)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace keel_test
