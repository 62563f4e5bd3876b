// open(O_NONBLOCK | O_NOCTTY [| O_NOFOLLOW]), fstat on the descriptor (not the name, so nothing
// can swap the file between the check and the read), then clear O_NONBLOCK.
#include "io/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "host/errors.h"

namespace keel {

std::string file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

FileDescriptor::~FileDescriptor() {
  if (fd >= 0) ::close(fd);
}

int open_regular_file(const std::string& path, const std::string& what, Symlinks symlinks) {
  int flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
  if (symlinks == Symlinks::refuse) flags |= O_NOFOLLOW;
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    const int error = errno;
    if (error == ELOOP && symlinks == Symlinks::refuse)
      throw KeelError(KEEL_ERR_IO, path + ": " + what + " is a symbolic link; expected a regular file inside the folder");
    throw KeelError(error == ENOENT ? KEEL_ERR_MISSING_FILE : KEEL_ERR_IO,
                    path + ": cannot open " + what + ": " + std::strerror(error));
  }
  FileDescriptor guard(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw KeelError(KEEL_ERR_IO, path + ": cannot stat " + what + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw KeelError(KEEL_ERR_IO, path + ": " + what + " is " + file_type_name(st.st_mode) + "; expected a regular file");
  const int status = ::fcntl(fd, F_GETFL);
  if (status < 0 || ::fcntl(fd, F_SETFL, status & ~O_NONBLOCK) != 0)
    throw KeelError(KEEL_ERR_IO, path + ": cannot configure " + what + ": " + std::strerror(errno));
  guard.fd = -1;
  return fd;
}

uint64_t file_size(int fd, const std::string& path, const std::string& what) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw KeelError(KEEL_ERR_IO, path + ": cannot stat " + what + ": " + std::strerror(errno));
  return uint64_t(st.st_size);
}

void read_exactly(int fd, unsigned char* out, size_t bytes, const std::string& path, const std::string& what) {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::read(fd, out + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw KeelError(KEEL_ERR_IO, path + ": cannot read " + what + ": " + std::strerror(errno));
    if (n == 0)
      throw KeelError(KEEL_ERR_IO, path + ": " + what + " shrank while being read: " + std::to_string(done) + " of " +
                                       std::to_string(bytes) + " bytes");
    done += size_t(n);
  }
}

std::vector<unsigned char> read_regular_file(const std::string& path, const std::string& what, Symlinks symlinks,
                                             size_t max_bytes) {
  FileDescriptor file(open_regular_file(path, what, symlinks));
  const uint64_t size = file_size(file.fd, path, what);
  if (size > max_bytes)
    throw KeelError(KEEL_ERR_IO, path + ": " + what + " is " + std::to_string(size) + " bytes, more than the " +
                                     std::to_string(max_bytes) + " bytes expected of it");
  std::vector<unsigned char> bytes(static_cast<size_t>(size));
  read_exactly(file.fd, bytes.data(), bytes.size(), path, what);
  return bytes;
}

}  // namespace keel
