// Each check names the folder, what was found and what is expected, in the order a user would
// fix them: exists, is a directory, is writable, supports O_DIRECT, has room.
#include "path_checks.hpp"
#include "errno_text.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/offload/aligned_buffer.hpp"

namespace keel_offload {

using keel_support::AlignedBuffer;
using keel_support::StatusError;

namespace {

constexpr uint64_t kProbeBytes = 4096;  // one block, the engine's alignment

std::string quoted(const std::string& path) { return "offload folder \"" + path + "\""; }

std::string probe_path(const std::string& folder) {
  static std::atomic<uint64_t> probes{0};
  return folder + "/.keel-offload-probe-" + std::to_string(getpid()) + "-" + std::to_string(probes++);
}

void check_is_directory(const std::string& folder) {
  struct stat info {};
  if (stat(folder.c_str(), &info) != 0) {
    int error = errno;
    if (error == ENOENT) {
      throw StatusError(KEEL_ERR_MISSING_FILE, quoted(folder) + " does not exist: expected an existing directory on a "
                                                             "disk-backed filesystem (create it first)");
    }
    throw StatusError(KEEL_ERR_IO, quoted(folder) + " cannot be examined: stat failed: " + errno_text(error));
  }
  if (!S_ISDIR(info.st_mode)) {
    throw StatusError(KEEL_ERR_INVALID_CONFIG, quoted(folder) + " is not a directory: expected a directory to keep "
                                                                "the offload files in");
  }
}

void check_writable(const std::string& folder, const std::string& probe) {
  int fd = open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) {
    int error = errno;
    throw StatusError(KEEL_ERR_IO, quoted(folder) + " is not writable: creating the probe file \"" + probe +
                                       "\" failed: " + errno_text(error) +
                                       "; expected a folder this process can create and remove files in");
  }
  close(fd);
}

// Opens the probe with O_DIRECT and writes and reads one aligned block: some filesystems accept
// the flag at open and refuse the first transfer.
void check_direct_io(const std::string& folder, const std::string& probe) {
  int fd = open(probe.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
  int error = fd < 0 ? errno : 0;
  if (fd >= 0) {
    AlignedBuffer block(kProbeBytes, kProbeBytes);
    if (pwrite(fd, block.data(), kProbeBytes, 0) != static_cast<ssize_t>(kProbeBytes) ||
        pread(fd, block.data(), kProbeBytes, 0) != static_cast<ssize_t>(kProbeBytes)) {
      error = errno != 0 ? errno : EIO;
    }
    close(fd);
  }
  if (error == 0) return;
  std::string type = filesystem_type_name(folder);
  bool in_memory = type == "tmpfs" || type == "ramfs";
  std::string advice = in_memory ? type + " keeps its files in memory and refuses O_DIRECT; " : "";
  throw StatusError(KEEL_ERR_INVALID_CONFIG,
                    quoted(folder) + " does not support O_DIRECT (filesystem " + type + "): direct I/O on a probe file "
                    "failed: " + errno_text(error) + "; " + advice +
                    "use a folder on a disk-backed filesystem such as ext4 or xfs");
}

// Since Linux 6.6 tmpfs accepts O_DIRECT, so the probe alone would let an "nvme" tier quietly
// keep the offloaded state in RAM, the memory it exists to spare.
void check_not_in_memory(const std::string& folder) {
  std::string type = filesystem_type_name(folder);
  if (type != "tmpfs" && type != "ramfs") return;
  throw StatusError(KEEL_ERR_INVALID_CONFIG,
                    quoted(folder) + " is on " + type + ", which keeps its files in memory: an nvme tier there would "
                    "hold the offloaded state in RAM; use a folder on a disk-backed filesystem such as ext4 or xfs "
                    "(or the cpu engine for a host-memory tier)");
}

void check_free_space(const std::string& folder, uint64_t reserve_bytes) {
  struct statvfs info {};
  if (statvfs(folder.c_str(), &info) != 0) {
    int error = errno;
    throw StatusError(KEEL_ERR_IO, quoted(folder) + " cannot be examined: statvfs failed: " + errno_text(error));
  }
  uint64_t free_bytes = static_cast<uint64_t>(info.f_bavail) * info.f_frsize;
  if (free_bytes < reserve_bytes) {
    throw StatusError(KEEL_ERR_IO, quoted(folder) + " has " + std::to_string(free_bytes) +
                                       " bytes free (statvfs) but the engine reserves " + std::to_string(reserve_bytes) +
                                       " bytes: free space there, pick a larger disk, or lower capacity_bytes");
  }
}

}  // namespace

std::string filesystem_type_name(const std::string& path) {
  struct statfs info {};
  if (statfs(path.c_str(), &info) != 0) return "unknown";
  switch (static_cast<unsigned long>(info.f_type)) {
    case TMPFS_MAGIC: return "tmpfs";
    case EXT4_SUPER_MAGIC: return "ext4";  // ext2/ext3 share the magic
    case XFS_SUPER_MAGIC: return "xfs";
    case BTRFS_SUPER_MAGIC: return "btrfs";
    case OVERLAYFS_SUPER_MAGIC: return "overlayfs";
    case NFS_SUPER_MAGIC: return "nfs";
    case RAMFS_MAGIC: return "ramfs";
    default: break;
  }
  char hex[32];
  std::snprintf(hex, sizeof hex, "0x%lx", static_cast<unsigned long>(info.f_type));
  return std::string("of type ") + hex;
}

void check_offload_folder(const std::string& folder, uint64_t reserve_bytes) {
  check_is_directory(folder);
  std::string probe = probe_path(folder);
  check_writable(folder, probe);
  try {
    check_direct_io(folder, probe);
    check_not_in_memory(folder);
  } catch (...) {
    unlink(probe.c_str());
    throw;
  }
  if (unlink(probe.c_str()) != 0) {
    int error = errno;
    throw StatusError(KEEL_ERR_IO, quoted(folder) + " is not writable: removing the probe file \"" + probe +
                                       "\" failed: " + errno_text(error));
  }
  check_free_space(folder, reserve_bytes);
}

}  // namespace keel_offload
