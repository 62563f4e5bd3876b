// Out of memory inside a submit, at each allocation it makes in turn: the submit either throws
// having opened no ticket, or returns a ticket that finishes. Before the fix a ticket opened
// just before a failed allocation stayed unfinished for ever, and wait_all() hung on it (this
// test then ends at its ctest TIMEOUT).
#include <gtest/gtest.h>

#include <cstring>
#include <new>
#include <string>

#include "allocation_faults.hpp"
#include "offload_test_support.hpp"

namespace {

using keel_support::AlignedBuffer;
using keel_support::Ticket;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = kKiB * kKiB;

// wait_all()'s error message, or "" when it returns.
std::string error_of_wait_all(keel_support::OffloadEngine& engine) {
  try {
    engine.wait_all();
  } catch (const keel_support::StatusError& error) {
    return error.what();
  }
  return "";
}

class SubmitOutOfMemory : public ::testing::TestWithParam<std::string> {};

TEST_P(SubmitOutOfMemory, NoFailedAllocationLeavesATicketUnfinished) {
  offload_test::ScratchFolder folder;
  if (GetParam() == "nvme") offload_test::require_direct_io(folder.path());
  if (HasFatalFailure()) return;
  auto engine = offload_test::make_engine(GetParam(), folder.path(), 4 * kMiB, 4, 64 * kKiB);
  engine->add_extent("shard", 2 * kMiB);
  AlignedBuffer source = offload_test::random_bytes(kMiB + 64 * kKiB, 5);  // 17 pieces of 64 KiB on nvme
  uint64_t failures_injected = 0;
  for (uint64_t n = 1; n < 1000; ++n) {
    bool threw = false;
    Ticket ticket = 0;
    offload_test::fail_nth_allocation_on_this_thread(n);
    try {
      ticket = engine->submit_write("shard", 0, source.data(), source.bytes());
    } catch (const std::bad_alloc&) {
      threw = true;
    } catch (const keel_support::StatusError& error) {
      threw = true;
      EXPECT_EQ(KEEL_ERR_OUT_OF_MEMORY, error.code) << error.what();
    }
    bool injected = offload_test::disarm_allocation_failure();
    if (!injected) break;  // submit_write made fewer than n allocations: every one has been failed once
    failures_injected++;
    // Hangs here before the fix: a ticket opened before the failure had pieces nobody would finish.
    std::string error = error_of_wait_all(*engine);
    if (threw) {
      EXPECT_EQ("", error) << "allocation " << n << " failed and submit_write threw, yet a ticket was left "
                               << "behind whose error wait_all() reported: " << error;
    } else {
      EXPECT_NE(error.find("submit_write"), std::string::npos)
          << "allocation " << n << " failed inside submit_write, which returned ticket " << ticket
          << "; expected its wait to report what failed, got: " << error;
    }
  }
  EXPECT_GT(failures_injected, 0u) << "no allocation inside submit_write was failed: the test proved nothing";
  // The engine still works after all that.
  engine->wait(engine->submit_write("shard", 0, source.data(), source.bytes()));
  AlignedBuffer back(source.bytes(), 4096);
  engine->wait(engine->submit_read("shard", 0, back.data(), back.bytes()));
  EXPECT_EQ(0, std::memcmp(back.data(), source.data(), source.bytes()));
}

INSTANTIATE_TEST_SUITE_P(Engines, SubmitOutOfMemory, ::testing::Values("cpu", "nvme"),
                         [](const auto& info) { return info.param; });

}  // namespace
