// POSIX durability: open + fsync (O_DIRECTORY for folders), rename(2) is atomic within a
// file system, and the parent folder is fsync'ed so the new name itself is on disk.
#include "io/durable_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "host/errors.h"

namespace keel {

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw KeelError(KEEL_ERR_IO, path + ": cannot open for fsync: " + std::strerror(errno));
  int rc = ::fsync(fd);
  int saved = errno;
  ::close(fd);
  if (rc != 0) throw KeelError(KEEL_ERR_IO, path + ": fsync failed: " + std::strerror(saved));
}

void rename_durably(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw KeelError(KEEL_ERR_IO, "cannot rename " + from + " to " + to + ": " + std::strerror(errno));
  std::string parent = std::filesystem::path(to).parent_path().string();
  fsync_path(parent.empty() ? "." : parent);
}

namespace {

// A new file holding `text`, on disk: write(2) itself, so a failure says why (a full disk, a file
// size limit) rather than a stream's bare failbit.
void write_and_fsync(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) throw KeelError(KEEL_ERR_IO, path + ": cannot create: " + std::strerror(errno));
  auto fail = [&](const char* doing, int error) {
    ::close(fd);
    throw KeelError(KEEL_ERR_IO, path + ": " + doing + " failed: " + std::strerror(error));
  };
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write", n < 0 ? errno : ENOSPC);
    done += size_t(n);
  }
  if (::fsync(fd) != 0) fail("fsync", errno);
  if (::close(fd) != 0) throw KeelError(KEEL_ERR_IO, path + ": close failed: " + std::strerror(errno));
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp-" + std::to_string(::getpid());
  try {
    write_and_fsync(temporary, text);
    rename_durably(temporary, path);
  } catch (...) {
    // Whatever failed (the write, the fsync, the rename), the temporary has no reader and no
    // later step removes it (.tmp-* leftovers are pruned by prefix, and this one is path.tmp-*).
    std::remove(temporary.c_str());
    throw;
  }
}

}  // namespace keel
