// The nvme engine's I/O path: requests cut into many block pieces give the same bytes at queue
// depth 1 and 16, and a failed transfer's error names the file, the offset and the errno.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "nvme_engine.hpp"
#include "offload_test_support.hpp"

namespace {

using keel_support::AlignedBuffer;
using keel_support::Ticket;
using offload_test::descriptor_of;
using offload_test::error_of;
using offload_test::only_file_in;
using offload_test::random_bytes;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = kKiB * kKiB;

std::unique_ptr<keel_offload::NvmeEngine> nvme_engine(const std::string& folder, uint32_t queue_depth,
                                                      uint64_t block_bytes) {
  keel_offload::NvmeEngineConfig config;
  config.folder = folder;
  config.capacity_bytes = 64 * kMiB;
  config.queue_depth = queue_depth;
  config.block_bytes = block_bytes;
  return std::make_unique<keel_offload::NvmeEngine>(config);
}

// Writes `source` in uneven requests (each many 16 KiB pieces, the last piece short), all in
// flight together, then reads it back the same way.
std::vector<char> round_trip(keel_offload::NvmeEngine& engine, const AlignedBuffer& source) {
  engine.add_extent("stream", source.bytes());
  const uint64_t sizes[] = {3 * kMiB + 12 * kKiB, 4 * kKiB, 1 * kMiB, 700 * kKiB - 4 * kKiB};
  std::vector<Ticket> tickets;
  uint64_t offset = 0;
  for (int i = 0; offset < source.bytes(); ++i) {
    uint64_t bytes = std::min(sizes[i % 4], source.bytes() - offset);
    tickets.push_back(engine.submit_write("stream", offset, source.data() + offset, bytes));
    offset += bytes;
  }
  engine.wait_all();
  AlignedBuffer back(source.bytes(), 4096);
  offset = 0;
  for (int i = 0; offset < source.bytes(); ++i) {
    uint64_t bytes = std::min(sizes[(i + 1) % 4], source.bytes() - offset);
    tickets.push_back(engine.submit_read("stream", offset, back.data() + offset, bytes));
    offset += bytes;
  }
  engine.wait_all();
  return std::vector<char>(back.data(), back.data() + back.bytes());
}

TEST(NvmeIo, QueueDepthOneAndSixteenGiveTheSameBytes) {
  offload_test::ScratchFolder folder;
  offload_test::require_direct_io(folder.path());
  if (HasFatalFailure()) return;
  AlignedBuffer source = random_bytes(20 * kMiB, 42);
  auto serial = nvme_engine(folder.path(), 1, 16 * kKiB);
  auto parallel = nvme_engine(folder.path(), 16, 16 * kKiB);
  std::vector<char> serial_back = round_trip(*serial, source);
  std::vector<char> parallel_back = round_trip(*parallel, source);
  ASSERT_EQ(source.bytes(), serial_back.size());
  EXPECT_EQ(0, std::memcmp(serial_back.data(), source.data(), source.bytes())) << "queue depth 1 changed the bytes";
  EXPECT_EQ(0, std::memcmp(parallel_back.data(), source.data(), source.bytes())) << "queue depth 16 changed the bytes";
  EXPECT_EQ(source.bytes(), parallel->counters().bytes_read);
  EXPECT_EQ(source.bytes(), parallel->counters().bytes_written);
}

TEST(NvmeIo, LargeRequestsAreCutIntoBlocksThatAllLand) {
  offload_test::ScratchFolder folder;
  offload_test::require_direct_io(folder.path());
  if (HasFatalFailure()) return;
  auto engine = nvme_engine(folder.path(), 4, 64 * kKiB);
  EXPECT_EQ(4 * 64 * kKiB, engine->ideal_request_bytes());
  AlignedBuffer source = random_bytes(9 * kMiB + 8 * kKiB, 9);  // 145 blocks, the last one short
  engine->add_extent("big", source.bytes());
  engine->wait(engine->submit_write("big", 0, source.data(), source.bytes()));
  // Read back in 100 KiB requests, whose pieces fall elsewhere than the write's blocks.
  AlignedBuffer back(source.bytes(), 4096);
  for (uint64_t offset = 0; offset < back.bytes(); offset += 100 * kKiB) {
    engine->submit_read("big", offset, back.data() + offset, std::min(100 * kKiB, back.bytes() - offset));
  }
  engine->wait_all();
  EXPECT_EQ(0, std::memcmp(back.data(), source.data(), source.bytes()));
}

TEST(NvmeIo, AFailedTransferNamesTheFileTheOffsetAndTheErrno) {
  offload_test::ScratchFolder folder;
  offload_test::require_direct_io(folder.path());
  if (HasFatalFailure()) return;
  auto engine = nvme_engine(folder.path(), 16, kMiB);
  engine->add_extent("opt.m", 4 * kMiB);
  std::string file = only_file_in(engine->files_folder());
  ASSERT_FALSE(file.empty()) << "expected one file in " << engine->files_folder();
  int fd = descriptor_of(file);
  ASSERT_GE(fd, 0) << "no descriptor for " << file;
  // Put a descriptor open for reading only in its place: writes then fail with EBADF.
  int read_only = open(file.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  ASSERT_GE(read_only, 0);
  ASSERT_EQ(fd, dup2(read_only, fd));
  close(read_only);
  AlignedBuffer source = random_bytes(2 * kMiB, 1);
  Ticket ticket = engine->submit_write("opt.m", kMiB, source.data(), 2 * kMiB);
  auto error = error_of([&] { engine->wait(ticket); });
  EXPECT_EQ(KEEL_ERR_IO, error.code);
  EXPECT_NE(error.message.find("write of 1048576 bytes at offset "), std::string::npos) << error.message;
  EXPECT_NE(error.message.find("of \"" + file + "\" failed"), std::string::npos) << error.message;
  EXPECT_NE(error.message.find("(errno " + std::to_string(EBADF) + ")"), std::string::npos) << error.message;
  EXPECT_EQ(0u, engine->counters().bytes_written) << "a failed request counts no bytes";
  // Reads still work on the read-only descriptor, and see zeros: nothing was written.
  AlignedBuffer back(kMiB, 4096);
  engine->wait(engine->submit_read("opt.m", kMiB, back.data(), kMiB));
  for (uint64_t i = 0; i < kMiB; ++i) ASSERT_EQ(0, back.data()[i]) << "byte " << i;
}

// A file shortened behind the engine's back: one 2 MiB block read comes back short (1.5 MiB), the
// engine asks again for the rest, which reads 0 bytes: an error naming the remainder's offset.
TEST(NvmeIo, AShortReadIsResumedAndAnEndOfFileIsAnError) {
  offload_test::ScratchFolder folder;
  offload_test::require_direct_io(folder.path());
  if (HasFatalFailure()) return;
  auto engine = nvme_engine(folder.path(), 16, 2 * kMiB);
  engine->add_extent("params", 2 * kMiB);
  AlignedBuffer source = random_bytes(2 * kMiB, 8);
  engine->wait(engine->submit_write("params", 0, source.data(), 2 * kMiB));
  std::string file = only_file_in(engine->files_folder());
  ASSERT_EQ(0, truncate(file.c_str(), 3 * kMiB / 2));  // someone else shortened the file
  AlignedBuffer back(4 * kMiB, 4096);
  Ticket first = engine->submit_read("params", 0, back.data(), 2 * kMiB);
  Ticket second = engine->submit_read("params", kMiB, back.data() + 2 * kMiB, kMiB);
  auto error = error_of([&] { engine->wait_all(); });
  EXPECT_EQ(KEEL_ERR_IO, error.code);
  EXPECT_NE(error.message.find("read of 524288 bytes at offset 1572864 of \"" + file + "\" moved 0 bytes"),
            std::string::npos) << error.message;
  EXPECT_NE(error.message.find("(and 1 more failed requests)"), std::string::npos) << error.message;
  EXPECT_EQ(0, std::memcmp(back.data(), source.data(), 3 * kMiB / 2)) << "the short read's bytes did not land";
  engine->wait(first);  // covered by wait_all: returns at once
  engine->wait(second);
}

}  // namespace
