// The nvme engine's start-up checks: a missing folder, a file in place of the folder, a
// read-only folder, a filesystem without O_DIRECT, a reservation larger than the free space and
// a wrong configuration each fail at creation with the path and what is expected, and leave
// nothing behind.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <linux/magic.h>

#include "nvme_engine.hpp"
#include "offload_test_support.hpp"

namespace {

using offload_test::CaughtError;
using offload_test::error_of;

constexpr uint64_t kMiB = uint64_t(1) << 20;

CaughtError start_error(const std::string& folder, uint64_t capacity_bytes = kMiB) {
  return error_of([&] {
    keel_offload::NvmeEngineConfig config;
    config.folder = folder;
    config.capacity_bytes = capacity_bytes;
    keel_offload::NvmeEngine engine(config);
  });
}

std::string start_message_or_success(const std::string& folder) {
  try {
    keel_offload::NvmeEngineConfig config;
    config.folder = folder;
    config.capacity_bytes = kMiB;
    keel_offload::NvmeEngine engine(config);
  } catch (const std::exception& error) {
    return error.what();
  }
  return "started";
}

size_t entries_in(const std::string& folder) {
  size_t count = 0;
  for (auto it = std::filesystem::directory_iterator(folder); it != std::filesystem::directory_iterator(); ++it) count++;
  return count;
}

#define EXPECT_MENTIONS(message, text) \
  EXPECT_NE((message).find(text), std::string::npos) << "expected \"" << (text) << "\" in: " << (message)

TEST(NvmeStartup, AMissingFolderIsNamed) {
  offload_test::ScratchFolder scratch;
  std::string missing = scratch.path() + "/not-there";
  auto error = start_error(missing);
  EXPECT_EQ(KEEL_ERR_MISSING_FILE, error.code);  // 0.19: a missing file has its own status
  EXPECT_MENTIONS(error.message, "offload folder \"" + missing + "\" does not exist");
  EXPECT_MENTIONS(error.message, "expected an existing directory");
}

TEST(NvmeStartup, AFileInPlaceOfTheFolderIsRefused) {
  offload_test::ScratchFolder scratch;
  std::string file = scratch.path() + "/a-file";
  std::ofstream(file) << "not a folder";
  auto error = start_error(file);
  EXPECT_EQ(KEEL_ERR_INVALID_CONFIG, error.code);
  EXPECT_MENTIONS(error.message, "offload folder \"" + file + "\" is not a directory");
}

// As root, mode 0555 does not stop writes, so the folder is made read-only by a read-only bind
// mount in a child with its own mount namespace.
TEST(NvmeStartup, AReadOnlyFolderIsRefused) {
  offload_test::ScratchFolder scratch;
  std::string folder = scratch.path() + "/read-only";
  std::filesystem::create_directory(folder);
  ASSERT_EQ(0, chmod(folder.c_str(), 0555));
  if (geteuid() != 0) {
    auto error = start_error(folder);
    EXPECT_EQ(KEEL_ERR_IO, error.code);
    EXPECT_MENTIONS(error.message, "offload folder \"" + folder + "\" is not writable");
    EXPECT_MENTIONS(error.message, "Permission denied");
    EXPECT_EQ(0u, entries_in(folder));
    return;
  }
  auto child = offload_test::run_in_private_mount_namespace([&] {
    if (mount(folder.c_str(), folder.c_str(), nullptr, MS_BIND, nullptr) != 0 ||
        mount(nullptr, folder.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) {
      return std::string("could not make a read-only bind mount: ") + std::strerror(errno);
    }
    return start_message_or_success(folder);
  });
  if (!child.ran) {
    GTEST_SKIP() << "running as root without a mount namespace of its own, the folder cannot be made read-only; "
                    "AFileInPlaceOfTheFolderIsRefused still covers a folder that cannot hold files";
  }
  EXPECT_MENTIONS(child.message, "offload folder \"" + folder + "\" is not writable");
  EXPECT_MENTIONS(child.message, "Read-only file system");
  EXPECT_MENTIONS(child.message, "expected a folder this process can create and remove files in");
}

// ramfs refuses O_DIRECT on every kernel; it is mounted in a child's own mount namespace.
TEST(NvmeStartup, AFilesystemWithoutDirectIoIsRefusedWithAdvice) {
  offload_test::ScratchFolder scratch;
  std::string folder = scratch.path() + "/ramfs";
  std::filesystem::create_directory(folder);
  auto child = offload_test::run_in_private_mount_namespace([&] {
    if (mount("keel-test-ramfs", folder.c_str(), "ramfs", 0, nullptr) != 0) {
      return std::string("could not mount a ramfs: ") + std::strerror(errno);
    }
    std::string message = start_message_or_success(folder);
    return message + "\nentries left in the folder: " + std::to_string(entries_in(folder));
  });
  if (!child.ran) GTEST_SKIP() << "no mount namespace of its own (CAP_SYS_ADMIN) to mount a ramfs in";
  EXPECT_MENTIONS(child.message, "offload folder \"" + folder + "\" does not support O_DIRECT (filesystem ramfs)");
  EXPECT_MENTIONS(child.message, "ramfs keeps its files in memory");
  EXPECT_MENTIONS(child.message, "use a folder on a disk-backed filesystem");
  EXPECT_MENTIONS(child.message, "\nentries left in the folder: 0");  // the probe file is removed
}

// Linux 6.6 taught tmpfs O_DIRECT: the engine follows what the probe finds, either way.
TEST(NvmeStartup, ATmpfsFolderIsRefusedWhetherOrNotItTakesDirectIo) {
  struct statfs info {};
  if (statfs("/dev/shm", &info) != 0 || info.f_type != TMPFS_MAGIC) GTEST_SKIP() << "/dev/shm is not a tmpfs here";
  std::string probe = "/dev/shm/keel-offload-test-probe-" + std::to_string(getpid());
  int fd = open(probe.c_str(), O_CREAT | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
  bool tmpfs_has_direct_io = fd >= 0;
  if (fd >= 0) close(fd);
  unlink(probe.c_str());
  auto error = start_error("/dev/shm");
  if (tmpfs_has_direct_io) {  // Linux 6.6 and later: the probe passes, the filesystem check refuses
    EXPECT_EQ(KEEL_ERR_INVALID_CONFIG, error.code);
    EXPECT_MENTIONS(error.message, "offload folder \"/dev/shm\" is on tmpfs, which keeps its files in memory");
    EXPECT_MENTIONS(error.message, "use a folder on a disk-backed filesystem");
    return;
  }
  EXPECT_EQ(KEEL_ERR_INVALID_CONFIG, error.code);
  EXPECT_MENTIONS(error.message, "offload folder \"/dev/shm\" does not support O_DIRECT (filesystem tmpfs)");
  EXPECT_MENTIONS(error.message, "tmpfs keeps its files in memory");
  EXPECT_MENTIONS(error.message, "use a folder on a disk-backed filesystem");
}

TEST(NvmeStartup, AReservationLargerThanTheFreeSpaceIsRefused) {
  offload_test::ScratchFolder scratch;
  struct statvfs info {};
  ASSERT_EQ(0, statvfs(scratch.path().c_str(), &info));
  uint64_t free_bytes = static_cast<uint64_t>(info.f_bavail) * info.f_frsize;
  uint64_t reservation = free_bytes + (uint64_t(64) << 30);
  auto error = start_error(scratch.path(), reservation);
  EXPECT_EQ(KEEL_ERR_IO, error.code);
  EXPECT_MENTIONS(error.message, "offload folder \"" + scratch.path() + "\" has ");
  EXPECT_MENTIONS(error.message, "bytes free (statvfs) but the engine reserves " + std::to_string(reservation));
  EXPECT_EQ(0u, entries_in(scratch.path())) << "a refused start left files behind";
}

// The plugin's default capacity is the free space read a moment before: other ranks reserving
// extents on the same disk at the same time must not make the start fail at random, so the
// engine is told not to hold the folder to it again (check_free_space false).
TEST(NvmeStartup, ACapacityReadFromTheFreeSpaceIsNotCheckedAgainstItAgain) {
  offload_test::ScratchFolder scratch;
  offload_test::require_direct_io(scratch.path());
  struct statvfs info {};
  ASSERT_EQ(0, statvfs(scratch.path().c_str(), &info));
  keel_offload::NvmeEngineConfig config;
  config.folder = scratch.path();
  // As if another rank took 64 GiB between the snapshot and the check.
  config.capacity_bytes = static_cast<uint64_t>(info.f_bavail) * info.f_frsize + (uint64_t(64) << 30);
  config.check_free_space = false;
  keel_offload::NvmeEngine engine(config);
  EXPECT_EQ(engine.capacity_bytes(), config.capacity_bytes);
  engine.add_extent("w", 4096);
}

TEST(NvmeStartup, AWrongConfigurationIsRefusedBeforeTheFolderIsTouched) {
  offload_test::ScratchFolder scratch;
  struct Case {
    uint32_t queue_depth;
    uint64_t block_bytes;
    uint64_t capacity_bytes;
    std::string expected;
  };
  for (const Case& c : {Case{0, kMiB, kMiB, "queue_depth 0 is outside 1..4096"},
                        Case{16, 1000, kMiB, "block_bytes 1000 is not a positive multiple of 4096"},
                        Case{16, kMiB, 0, "capacity_bytes is 0"}}) {
    auto error = error_of([&] {
      keel_offload::NvmeEngineConfig config;
      config.folder = scratch.path();
      config.queue_depth = c.queue_depth;
      config.block_bytes = c.block_bytes;
      config.capacity_bytes = c.capacity_bytes;
      keel_offload::NvmeEngine engine(config);
    });
    EXPECT_EQ(KEEL_ERR_INVALID_CONFIG, error.code);
    EXPECT_MENTIONS(error.message, c.expected);
  }
  EXPECT_EQ(0u, entries_in(scratch.path()));
}

}  // namespace
