// A 1 GiB request in 4 KiB blocks (262144 pieces) is cut into pieces as queue slots free up:
// the engine allocates a few small objects for it, not a list of every piece (before the fix,
// 2 x 262144 pieces, some 29 MB), and still fills its whole queue at once. The extent's file is
// swapped for /dev/null and the source is an address range with no memory behind it, so the
// gigabyte costs neither disk writes nor RAM.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "allocation_faults.hpp"
#include "nvme_engine.hpp"
#include "offload_test_support.hpp"
#include "uring_pump.hpp"

namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kGiB = kKiB * kKiB * kKiB;

std::atomic<unsigned> most_entries_ready{0};

int record_entries_ready(unsigned entries_ready) {
  unsigned seen = most_entries_ready.load();
  while (entries_ready > seen && !most_entries_ready.compare_exchange_weak(seen, entries_ready)) {
  }
  return 0;
}

TEST(NvmeHugeRequest, IsCutAsTheQueueTakesItWithBoundedMemoryAndAFullQueue) {
  offload_test::ScratchFolder folder;
  offload_test::require_direct_io(folder.path());
  if (HasFatalFailure()) return;
  constexpr uint32_t kQueueDepth = 8;
  keel_offload::NvmeEngineConfig config;
  config.folder = folder.path();
  config.capacity_bytes = kGiB;
  config.queue_depth = kQueueDepth;
  config.block_bytes = 4 * kKiB;
  keel_offload::NvmeEngine engine(config);
  engine.add_extent("huge", kGiB);
  int fd = offload_test::descriptor_of(offload_test::only_file_in(engine.files_folder()));
  ASSERT_GE(fd, 0) << "no descriptor for the extent's file in " << engine.files_folder();
  int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  ASSERT_EQ(fd, dup2(null_fd, fd));
  close(null_fd);
  void* source = mmap(nullptr, kGiB, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(MAP_FAILED, source);

  most_entries_ready = 0;
  keel_offload::set_before_submit_hook_for_tests(record_entries_ready);
  uint64_t allocated_bytes = 0;
  {
    offload_test::AllocationCount count;
    engine.wait(engine.submit_write("huge", 0, source, kGiB));
    allocated_bytes = count.bytes();
  }
  keel_offload::set_before_submit_hook_for_tests(nullptr);
  munmap(source, kGiB);

  EXPECT_EQ(kGiB, engine.counters().bytes_written);
  EXPECT_LT(allocated_bytes, 64 * kKiB) << "a request of 262144 pieces made the engines' threads allocate "
                                        << allocated_bytes << " bytes; expected a bounded amount (under 64 KiB), "
                                        << "pieces cut only as queue slots free up";
  // The wake-up read is one entry; the rest are pieces.
  EXPECT_GE(most_entries_ready.load(), kQueueDepth)
      << "at most " << most_entries_ready.load() << " entries went to the kernel in one submit; expected the "
      << "queue depth (" << kQueueDepth << " pieces) in flight together";
}

}  // namespace
