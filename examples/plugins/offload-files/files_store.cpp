// pread/pwrite loops (a transfer may come back short) and errno turned into messages that name
// the file; everything about tickets and threads is the base's.
#include "files_store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace keel_files {

using keel_support::StatusError;

namespace {

std::string errno_text() { return std::string(std::strerror(errno)) + " (errno " + std::to_string(errno) + ")"; }

}  // namespace

FileExtents::FileExtents(const std::string& parent) {
  std::string pattern = parent + "/keel-files-XXXXXX";
  if (!mkdtemp(pattern.data()))
    throw StatusError(KEEL_ERR_IO, "cannot make a folder in \"" + parent + "\": " + errno_text());
  folder_ = pattern;
}

FileExtents::~FileExtents() {
  for (size_t i = 0; i < fds_.size(); ++i) {
    close(fds_[i]);
    unlink(paths_[i].c_str());
  }
  rmdir(folder_.c_str());
}

void FileExtents::add_extent(size_t index, const std::string& /*name*/, uint64_t bytes) {
  // The extent's number, not its name, makes the file's name: names may hold any character.
  const std::string path = folder_ + "/" + std::to_string(index) + ".extent";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw StatusError(KEEL_ERR_IO, "cannot create \"" + path + "\": " + errno_text());
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {  // a sparse file: its bytes read as zeros
    const std::string error = errno_text();
    close(fd);
    unlink(path.c_str());
    throw StatusError(KEEL_ERR_IO, "cannot size \"" + path + "\" to " + std::to_string(bytes) + " bytes: " + error);
  }
  fds_.push_back(fd);
  paths_.push_back(path);
}

void FileExtents::write(size_t index, uint64_t offset, const void* src, uint64_t bytes) {
  const char* from = static_cast<const char*>(src);
  while (bytes > 0) {
    const ssize_t done = pwrite(fds_[index], from, bytes, static_cast<off_t>(offset));
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) throw StatusError(KEEL_ERR_IO, "writing \"" + paths_[index] + "\": " + errno_text());
    from += done, offset += uint64_t(done), bytes -= uint64_t(done);
  }
}

void FileExtents::read(size_t index, uint64_t offset, void* dst, uint64_t bytes) {
  char* to = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t done = pread(fds_[index], to, bytes, static_cast<off_t>(offset));
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) throw StatusError(KEEL_ERR_IO, "reading \"" + paths_[index] + "\": " + errno_text());
    to += done, offset += uint64_t(done), bytes -= uint64_t(done);
  }
}

}  // namespace keel_files
