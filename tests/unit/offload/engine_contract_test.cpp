// The contract of offload_engine.hpp, run against both engines: round trips of random bytes,
// many requests in flight, zeros for bytes never written, and the refusals (alignment, bounds,
// capacity, names, tickets) with messages that say what and where.
#include <cstring>
#include <random>
#include <vector>

#include "offload_test_support.hpp"

namespace {

using keel_support::AlignedBuffer;
using keel_support::OffloadEngine;
using keel_support::Ticket;
using offload_test::error_of;
using offload_test::make_engine;
using offload_test::random_bytes;

constexpr uint64_t kMiB = uint64_t(1) << 20;

class EngineContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "nvme") {
      offload_test::require_direct_io(folder_.path());
      if (HasFatalFailure()) return;
    }
    engine_ = make_engine(GetParam(), folder_.path(), 64 * kMiB);
    alignment_ = engine_->alignment_bytes();
  }

  offload_test::ScratchFolder folder_;
  std::unique_ptr<OffloadEngine> engine_;
  uint64_t alignment_ = 0;
};

TEST_P(EngineContract, RoundTripsRandomBytesAtManyOffsetsAndSizes) {
  const uint64_t extent_bytes = 8 * kMiB;
  engine_->add_extent("layer0.w", extent_bytes);
  engine_->add_extent("layer1.w", kMiB);
  AlignedBuffer neighbour = random_bytes(kMiB, 7);
  engine_->wait(engine_->submit_write("layer1.w", 0, neighbour.data(), kMiB));

  std::vector<char> expected(extent_bytes, 0);
  std::mt19937 pick(11);
  const uint64_t units = extent_bytes / alignment_;
  for (int round = 0; round < 40; ++round) {
    uint64_t first = pick() % units;
    uint64_t count = 1 + pick() % std::min<uint64_t>(units - first, 3 * kMiB / alignment_);
    AlignedBuffer source = random_bytes(count * alignment_, 100 + round);
    engine_->wait(engine_->submit_write("layer0.w", first * alignment_, source.data(), count * alignment_));
    std::memcpy(expected.data() + first * alignment_, source.data(), count * alignment_);
  }
  for (int round = 0; round < 40; ++round) {
    uint64_t first = pick() % units;
    uint64_t count = 1 + pick() % std::min<uint64_t>(units - first, 3 * kMiB / alignment_);
    AlignedBuffer back(count * alignment_, 4096);
    engine_->wait(engine_->submit_read("layer0.w", first * alignment_, back.data(), count * alignment_));
    ASSERT_EQ(0, std::memcmp(back.data(), expected.data() + first * alignment_, count * alignment_))
        << "bytes [" << first * alignment_ << ", " << (first + count) * alignment_ << ") of layer0.w differ";
  }
  AlignedBuffer whole(extent_bytes, 4096);
  engine_->wait(engine_->submit_read("layer0.w", 0, whole.data(), extent_bytes));
  EXPECT_EQ(0, std::memcmp(whole.data(), expected.data(), extent_bytes)) << "the whole of layer0.w differs";
  AlignedBuffer neighbour_back(kMiB, 4096);
  engine_->wait(engine_->submit_read("layer1.w", 0, neighbour_back.data(), kMiB));
  EXPECT_EQ(0, std::memcmp(neighbour_back.data(), neighbour.data(), kMiB)) << "writes to layer0.w reached layer1.w";
}

TEST_P(EngineContract, ManyRequestsInFlightEachLandWhereTheySaid) {
  const int requests = 64;
  const uint64_t chunk = 16 * alignment_ * (GetParam() == "nvme" ? 4 : 64);  // 256 KiB or 64 KiB
  engine_->add_extent("shards", requests * chunk);
  std::vector<AlignedBuffer> sources;
  std::vector<Ticket> tickets;
  for (int i = 0; i < requests; ++i) {
    sources.push_back(random_bytes(chunk, 1000 + i));
    tickets.push_back(engine_->submit_write("shards", i * chunk, sources.back().data(), chunk));
  }
  engine_->wait_all();
  std::vector<AlignedBuffer> results;
  tickets.clear();
  for (int i = requests; i-- > 0;) {  // in reverse, so no request's place follows its order
    results.emplace_back(chunk, 4096);
    tickets.push_back(engine_->submit_read("shards", i * chunk, results.back().data(), chunk));
  }
  for (size_t t = tickets.size(); t-- > 0;) engine_->wait(tickets[t]);
  for (int i = 0; i < requests; ++i) {
    const AlignedBuffer& result = results[requests - 1 - i];
    EXPECT_EQ(0, std::memcmp(result.data(), sources[i].data(), chunk)) << "chunk " << i << " differs";
  }
}

TEST_P(EngineContract, BytesNeverWrittenReadAsZeros) {
  engine_->add_extent("moments", 2 * kMiB);
  AlignedBuffer middle = random_bytes(kMiB / 2, 3);
  engine_->wait(engine_->submit_write("moments", kMiB / 2, middle.data(), kMiB / 2));
  AlignedBuffer back(2 * kMiB, 4096);
  std::memset(back.data(), 0x7f, back.bytes());
  engine_->wait(engine_->submit_read("moments", 0, back.data(), 2 * kMiB));
  for (uint64_t i = 0; i < 2 * kMiB; ++i) {
    bool written = i >= kMiB / 2 && i < kMiB;
    char want = written ? middle.data()[i - kMiB / 2] : 0;
    ASSERT_EQ(want, back.data()[i]) << "byte " << i << (written ? " (written)" : " (never written)");
  }
}

TEST_P(EngineContract, UnalignedOrOutOfRangeRequestsAreRefusedWithTheRule) {
  engine_->add_extent("grads", kMiB);
  AlignedBuffer buffer(2 * kMiB, 4096);
  std::string rule = "is not a multiple of the engine's alignment " + std::to_string(alignment_);
  struct Case {
    const char* what;
    uint64_t offset;
    uint64_t buffer_shift;
    uint64_t bytes;
    std::string expected;
  };
  std::vector<Case> cases = {
      {"offset", alignment_ / 2, 0, alignment_, "the offset " + rule},
      {"buffer", 0, alignment_ / 2, alignment_, "the buffer address " + rule},
      {"size", 0, 0, alignment_ + alignment_ / 2, "the size " + rule},
      {"past the end", kMiB - alignment_, 0, 2 * alignment_, "the range ends past the extent's 1048576 bytes"},
  };
  for (const Case& c : cases) {
    for (bool write : {true, false}) {
      auto error = error_of([&] {
        char* at = buffer.data() + c.buffer_shift;
        write ? engine_->submit_write("grads", c.offset, at, c.bytes) : engine_->submit_read("grads", c.offset, at, c.bytes);
      });
      EXPECT_EQ(KEEL_ERR_INVALID_ARGUMENT, error.code) << c.what;
      EXPECT_NE(error.message.find(c.expected), std::string::npos) << c.what << ": " << error.message;
      EXPECT_NE(error.message.find(std::string(write ? "submit_write" : "submit_read") + " of extent \"grads\""),
                std::string::npos) << error.message;
    }
  }
  EXPECT_EQ(0u, engine_->counters().requests_completed) << "a refused request must not run";
}

TEST_P(EngineContract, CapacityIsACap) {
  auto small = make_engine(GetParam(), folder_.path(), kMiB);
  small->add_extent("a", kMiB / 2);
  auto error = error_of([&] { small->add_extent("b", 3 * kMiB / 4); });
  EXPECT_EQ(KEEL_ERR_OUT_OF_MEMORY, error.code);
  EXPECT_NE(error.message.find("add_extent \"b\" of 786432 bytes"), std::string::npos) << error.message;
  EXPECT_NE(error.message.find("already holds 524288 bytes in 1 extents"), std::string::npos) << error.message;
  EXPECT_NE(error.message.find("exceed its capacity_bytes 1048576"), std::string::npos) << error.message;
  small->add_extent("c", kMiB / 2);  // what fits still fits after a refusal
  EXPECT_EQ(kMiB / 2, small->extent_bytes("c"));
}

TEST_P(EngineContract, ExtentNamesAndSizesAreChecked) {
  engine_->add_extent("x", alignment_);
  auto repeated = error_of([&] { engine_->add_extent("x", alignment_); });
  EXPECT_NE(repeated.message.find("an extent of that name already exists"), std::string::npos) << repeated.message;
  auto empty = error_of([&] { engine_->add_extent("", alignment_); });
  EXPECT_NE(empty.message.find("the name is empty"), std::string::npos) << empty.message;
  auto unaligned = error_of([&] { engine_->add_extent("y", alignment_ + 1); });
  EXPECT_NE(unaligned.message.find("positive multiple of the engine's alignment"), std::string::npos)
      << unaligned.message;
  AlignedBuffer buffer(alignment_, 4096);
  auto missing = error_of([&] { engine_->submit_read("nope", 0, buffer.data(), alignment_); });
  EXPECT_EQ(KEEL_ERR_NOT_FOUND, missing.code);
  EXPECT_NE(missing.message.find("no extent is called \"nope\""), std::string::npos) << missing.message;
}

TEST_P(EngineContract, TicketsAreWaitedOnceAndCountersAddUp) {
  engine_->add_extent("state", kMiB);
  AlignedBuffer source = random_bytes(kMiB, 5);
  Ticket write = engine_->submit_write("state", 0, source.data(), kMiB);
  engine_->wait(write);
  engine_->wait(write);  // already waited: returns at once
  Ticket read = engine_->submit_read("state", 0, source.data(), kMiB / 2);
  Ticket nothing = engine_->submit_read("state", 0, source.data(), 0);
  engine_->wait_all();
  engine_->wait(read);
  engine_->wait(nothing);
  auto never = error_of([&] { engine_->wait(read + 100); });
  EXPECT_EQ(KEEL_ERR_INVALID_ARGUMENT, never.code);
  EXPECT_NE(never.message.find("was never issued"), std::string::npos) << never.message;
  auto counters = engine_->counters();
  EXPECT_EQ(kMiB, counters.bytes_written);
  EXPECT_EQ(kMiB / 2, counters.bytes_read);
  EXPECT_EQ(3u, counters.requests_completed);
  EXPECT_GT(counters.busy_seconds, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineContract, ::testing::Values("cpu", "nvme"),
                         [](const ::testing::TestParamInfo<std::string>& param_info) { return param_info.param; });

}  // namespace
