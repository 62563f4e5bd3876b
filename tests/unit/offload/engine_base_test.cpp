// keel_support::SyncOffloadEngine behind OffloadSlots' table, with stores made to misbehave: a
// store's error, thrown on a worker thread, reaches the thread that waits as its status and
// message (set_error is per thread); destroy runs every queued request before the store goes;
// two workers overlap requests; and a store refusing add_extent leaves no extent behind.
#include <gtest/gtest.h>
#include <keel/offload.h>
#include <keel_support/offload/offload_engine_base.hpp>
#include <keel_support/offload/offload_slots.hpp>
#include <keel_support/common/testing/recording_host.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

using keel_support::StatusError;
using keel_support::testing::last_message;
using keel_support::testing::recording_host;

// Memory extents whose writes can fail or crawl, counting what it ran and on which threads.
struct TestStore final : keel_support::ExtentStore {
  std::vector<std::vector<char>> extents;
  std::atomic<int> writes{0};
  std::atomic<int> running{0}, most_running{0};
  bool fail_writes = false;
  bool refuse_extents = false;
  std::chrono::milliseconds write_time{0};
  std::shared_ptr<int> writes_when_destroyed;  // set: the store writes its count there as it dies

  ~TestStore() override {
    if (writes_when_destroyed) *writes_when_destroyed = writes;
  }

  void add_extent(size_t, const std::string& name, uint64_t bytes) override {
    if (refuse_extents) throw StatusError(KEEL_ERR_IO, "no room for \"" + name + "\"");
    extents.emplace_back(bytes, 0);
  }
  void write(size_t index, uint64_t offset, const void* src, uint64_t bytes) override {
    const int now = ++running;
    for (int seen = most_running; now > seen && !most_running.compare_exchange_weak(seen, now);) {
    }
    std::this_thread::sleep_for(write_time);
    --running;
    if (fail_writes) throw StatusError(KEEL_ERR_IO, "the disk is on fire");
    std::memcpy(extents[index].data() + offset, src, bytes);
    ++writes;
  }
  void read(size_t index, uint64_t offset, void* dst, uint64_t bytes) override {
    std::memcpy(dst, extents[index].data() + offset, bytes);
  }
};

struct Tier {
  explicit Tier(unsigned workers = 1) {
    auto owned = std::make_unique<TestStore>();
    store = owned.get();
    keel_support::SyncEngineShape shape{"test", 64, 4096, 1 << 20, workers};
    handle = new keel_support::OffloadEngineHandle(
        &host, "offload test", std::make_unique<keel_support::SyncOffloadEngine>(shape, std::move(owned)));
  }
  ~Tier() { destroy(); }
  void destroy() {
    if (handle) api.destroy(handle);
    handle = nullptr;
  }
  keel_host host = recording_host();
  keel_offload_api api = keel_support::OffloadSlots::table(nullptr, nullptr);
  TestStore* store = nullptr;
  void* handle = nullptr;
  alignas(64) char buffer[4096] = {};
};

TEST(SyncOffloadEngine, AWorkersErrorReachesTheWaitingThreadWithItsMessage) {
  Tier tier;
  ASSERT_EQ(tier.api.add_extent(tier.handle, "moments", 4096), KEEL_OK) << last_message();
  tier.store->fail_writes = true;
  uint64_t ticket = 0;
  ASSERT_EQ(tier.api.submit_write(tier.handle, "moments", 64, tier.buffer, 128, &ticket), KEEL_OK) << last_message();
  last_message().clear();
  EXPECT_EQ(tier.api.wait(tier.handle, ticket), KEEL_ERR_IO);
  EXPECT_EQ(last_message(),
            "offload test: test engine: submit_write of extent \"moments\" at offset 64, 128 bytes: the disk is on fire");
  EXPECT_EQ(tier.api.wait(tier.handle, ticket), KEEL_OK) << "an error is reported once";

  // wait_all reports the first failure and how many more there were.
  uint64_t first = 0, second = 0;
  tier.api.submit_write(tier.handle, "moments", 0, tier.buffer, 64, &first);
  tier.api.submit_write(tier.handle, "moments", 128, tier.buffer, 64, &second);
  EXPECT_EQ(tier.api.wait_all(tier.handle), KEEL_ERR_IO);
  EXPECT_NE(last_message().find("at offset 0, 64 bytes: the disk is on fire (and 1 more failed requests)"),
            std::string::npos)
      << last_message();
  keel_offload_counters counters{sizeof(counters)};
  ASSERT_EQ(tier.api.counters(tier.handle, &counters), KEEL_OK);
  EXPECT_EQ(counters.requests_completed, 0u) << "failed requests are not counted as completed";
}

TEST(SyncOffloadEngine, DestroyRunsEveryQueuedRequestFirst) {
  Tier tier;
  ASSERT_EQ(tier.api.add_extent(tier.handle, "params", 4096), KEEL_OK) << last_message();
  tier.store->write_time = std::chrono::milliseconds(5);
  auto writes_when_store_died = std::make_shared<int>(-1);
  tier.store->writes_when_destroyed = writes_when_store_died;
  uint64_t ticket = 0;
  for (int i = 0; i < 20; ++i) tier.api.submit_write(tier.handle, "params", 64 * uint64_t(i), tier.buffer, 64, &ticket);
  EXPECT_LT(tier.store->writes.load(), 20) << "the writes crawl, so some are still queued at destroy";
  tier.destroy();
  EXPECT_EQ(*writes_when_store_died, 20) << "destroy freed the store before its queue ran out";
}

TEST(SyncOffloadEngine, TwoWorkersOverlapRequests) {
  Tier tier(2);
  ASSERT_EQ(tier.api.add_extent(tier.handle, "grads", 4096), KEEL_OK) << last_message();
  tier.store->write_time = std::chrono::milliseconds(20);
  uint64_t ticket = 0;
  for (int i = 0; i < 4; ++i) tier.api.submit_write(tier.handle, "grads", 64 * uint64_t(i), tier.buffer, 64, &ticket);
  ASSERT_EQ(tier.api.wait_all(tier.handle), KEEL_OK) << last_message();
  EXPECT_EQ(tier.store->most_running.load(), 2);
  EXPECT_EQ(tier.store->writes.load(), 4);
}

TEST(SyncOffloadEngine, AStoreRefusingAnExtentLeavesNoneBehind) {
  Tier tier;
  tier.store->refuse_extents = true;
  EXPECT_EQ(tier.api.add_extent(tier.handle, "shard", 4096), KEEL_ERR_IO);
  EXPECT_EQ(last_message(), "offload test: no room for \"shard\"");
  tier.store->refuse_extents = false;
  EXPECT_EQ(tier.api.add_extent(tier.handle, "shard", 4096), KEEL_OK) << "the name is still free: " << last_message();
}

}  // namespace
