// Files, extents and the cutting of requests into blocks; the ring itself is uring_pump's.
#include "nvme_engine.hpp"
#include "errno_text.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "keel_support/common/abi_guard.hpp"
#include "path_checks.hpp"
#include "stale_folders.hpp"
#include "uring_pump.hpp"

namespace keel_offload {

using keel_support::StatusError;

namespace {

constexpr uint32_t kMaxQueueDepth = 4096;
constexpr size_t kMaxNameInFileName = 80;

const NvmeEngineConfig& checked(const NvmeEngineConfig& config) {
  if (config.folder.empty()) {
    throw StatusError(KEEL_ERR_INVALID_CONFIG, "nvme engine: folder is empty; expected the path of a folder on a "
                                               "disk-backed filesystem");
  }
  if (config.capacity_bytes == 0) {
    throw StatusError(KEEL_ERR_INVALID_CONFIG, "nvme engine: capacity_bytes is 0; expected the most bytes the engine "
                                               "may keep in \"" + config.folder + "\" (> 0)");
  }
  if (config.queue_depth == 0 || config.queue_depth > kMaxQueueDepth) {
    throw StatusError(KEEL_ERR_INVALID_CONFIG, "nvme engine: queue_depth " + std::to_string(config.queue_depth) +
                                                   " is outside 1.." + std::to_string(kMaxQueueDepth));
  }
  if (config.block_bytes == 0 || config.block_bytes % NvmeEngine::kAlignmentBytes != 0 ||
      config.block_bytes > (uint64_t(1) << 30)) {
    throw StatusError(KEEL_ERR_INVALID_CONFIG, "nvme engine: block_bytes " + std::to_string(config.block_bytes) +
                                                   " is not a positive multiple of " +
                                                   std::to_string(NvmeEngine::kAlignmentBytes) + " up to 1 GiB");
  }
  for (char c : config.owner) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') {
      throw StatusError(KEEL_ERR_INVALID_CONFIG, "nvme engine: owner \"" + config.owner + "\" holds '" +
                                                     std::string(1, c) + "'; expected letters, digits, '-' and '_'");
    }
  }
  return config;
}

// keel-offload-[<owner>-]<pid>-<n>: the owner (a rank) and the pid tell whose files these are;
// n keeps two engines of one process apart.
std::string make_files_folder(const std::string& folder, const std::string& owner) {
  static std::atomic<uint64_t> engines{0};
  std::string path = folder + "/keel-offload-" + (owner.empty() ? "" : owner + "-") + std::to_string(getpid()) + "-" +
                     std::to_string(engines++);
  if (mkdir(path.c_str(), 0700) != 0) {
    int error = errno;
    throw StatusError(KEEL_ERR_IO, "nvme engine: creating the engine's folder \"" + path + "\" failed: " +
                                       errno_text(error));
  }
  return path;
}

// The extent's name made safe for a file name, so a person can tell the files apart.
std::string file_name_for(size_t index, const std::string& name) {
  std::string safe;
  for (char c : name.substr(0, kMaxNameInFileName)) {
    safe += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ? c : '_';
  }
  return std::to_string(index) + "-" + safe + ".extent";
}

}  // namespace

NvmeEngine::NvmeEngine(const NvmeEngineConfig& config)
    : config_(checked(config)),
      extents_("nvme", config.capacity_bytes, kAlignmentBytes),
      tickets_("nvme") {
  check_offload_folder(config_.folder, config_.check_free_space ? config_.capacity_bytes : 0);
  files_folder_ = make_files_folder(config_.folder, config_.owner);
  try {
    write_owner_file(files_folder_);  // so a later run can remove the folder if this process dies
    pump_ = std::make_unique<UringPump>(config_.queue_depth, tickets_);
  } catch (...) {
    remove_files();
    throw;
  }
}

NvmeEngine::~NvmeEngine() {
  pump_.reset();  // waits for the pieces in flight: they write into our files and callers' buffers
  remove_files();
}

void NvmeEngine::remove_files() noexcept {
  for (ExtentFile& file : files_) {
    close(file.fd);
    if (unlink(file.path->c_str()) != 0) {
      std::fprintf(stderr, "keel: nvme engine: cannot remove \"%s\": %s\n", file.path->c_str(), std::strerror(errno));
    }
  }
  files_.clear();
  if (!files_folder_.empty()) unlink((files_folder_ + "/" + kOwnerFileName).c_str());
  if (!files_folder_.empty() && rmdir(files_folder_.c_str()) != 0) {
    std::fprintf(stderr, "keel: nvme engine: cannot remove \"%s\": %s\n", files_folder_.c_str(), std::strerror(errno));
  }
}

void NvmeEngine::add_extent(const std::string& name, uint64_t bytes) {
  extents_.check_add(name, bytes);
  auto path = std::make_unique<std::string>(files_folder_ + "/" + file_name_for(extents_.count(), name));
  int fd = open(path->c_str(), O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) {
    int error = errno;
    throw StatusError(KEEL_ERR_IO, "nvme engine: add_extent \"" + name + "\": creating \"" + *path + "\" failed: " +
                                       errno_text(error));
  }
  // posix_fallocate would emulate a filesystem without fallocate by writing zeros; ftruncate
  // gives the same zeros (a sparse file) at no cost there.
  int error = fallocate(fd, 0, 0, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
  if (error == EOPNOTSUPP) error = ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
  if (error != 0) {
    close(fd);
    unlink(path->c_str());
    throw StatusError(KEEL_ERR_IO, "nvme engine: add_extent \"" + name + "\": reserving " + std::to_string(bytes) +
                                       " bytes for \"" + *path + "\" failed: " + errno_text(error) +
                                       (error == ENOSPC ? "; free space in \"" + config_.folder + "\"" : ""));
  }
  extents_.add(name, bytes);
  files_.push_back({fd, std::move(path)});
}

uint64_t NvmeEngine::extent_bytes(const std::string& name) const { return extents_.bytes_of(extents_.find(name)); }

Ticket NvmeEngine::submit_write(const std::string& name, uint64_t offset, const void* src, uint64_t bytes) {
  // The write only reads from `src`; the piece type is shared with reads, hence the cast.
  return submit(Direction::write, "submit_write", name, offset, static_cast<char*>(const_cast<void*>(src)), bytes);
}

Ticket NvmeEngine::submit_read(const std::string& name, uint64_t offset, void* dst, uint64_t bytes) {
  return submit(Direction::read, "submit_read", name, offset, static_cast<char*>(dst), bytes);
}

Ticket NvmeEngine::submit(Direction direction, const char* verb, const std::string& name, uint64_t offset,
                          char* buffer, uint64_t bytes) {
  size_t index = extents_.find(name);
  extents_.check_request(verb, index, offset, buffer, bytes);
  uint64_t block = config_.block_bytes;
  if (bytes == 0) return tickets_.open(0, direction, 0);
  // The request's node is allocated before its ticket opens, and the pump cuts it into block
  // pieces as its queue takes them: once the ticket exists nothing can fail (no ticket is left
  // that nobody will finish), and a request of any size costs one node.
  IoRequests request(1);
  Ticket ticket = tickets_.open(pieces_in(bytes, block), direction, bytes);
  const ExtentFile& file = files_[index];
  request.front() = {ticket, direction, file.fd, file.path.get(), offset, buffer, bytes, block};
  pump_->submit(std::move(request));
  return ticket;
}

void NvmeEngine::wait(Ticket ticket) { tickets_.wait(ticket); }
void NvmeEngine::wait_all() { tickets_.wait_all(); }
OffloadCounters NvmeEngine::counters() const { return tickets_.counters(); }

}  // namespace keel_offload
