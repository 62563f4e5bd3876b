// Owner files and the removal of folders whose process died (stale_folders.hpp). A folder is
// claimed by renaming it before anything in it is removed, so ranks starting at once in one
// folder never remove the same files twice, and only the engine's own kinds of file (its
// *.extent files and the owner file, regular files all) are unlinked: anything else keeps the
// folder where it is.
#include "stale_folders.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <keel_support/common/abi_guard.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace keel_offload {
namespace {

constexpr const char* kFolderPrefix = "keel-offload-";

std::string this_host() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

std::vector<std::string> entries_of(const std::string& folder) {
  std::vector<std::string> names;
  std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir(folder.c_str()), closedir);
  if (!dir) return names;
  while (const dirent* entry = readdir(dir.get())) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  return names;
}

struct Owner {
  std::string host;
  long pid = 0;
};

// The owner file, read only as a small regular file (never through a link); false without one.
bool read_owner(const std::string& files_folder, Owner& owner) {
  const std::string path = files_folder + "/" + kOwnerFileName;
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat info {};
  char text[512] = {};
  const bool regular = fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && info.st_size < long(sizeof(text));
  const ssize_t got = regular ? read(fd, text, sizeof(text) - 1) : -1;
  close(fd);
  if (got <= 0) return false;
  char host[256] = {};
  if (std::sscanf(text, "host %255s\npid %ld", host, &owner.pid) != 2 || owner.pid <= 0) return false;
  owner.host = host;
  return true;
}

// The pid in an old-style name, keel-offload-[<owner>-]<pid>-<n>; 0 when there is none.
long pid_in_name(const std::string& name) {
  const size_t last = name.rfind('-');
  if (last == std::string::npos || last == 0) return 0;
  const size_t before = name.rfind('-', last - 1);
  if (before == std::string::npos) return 0;
  const std::string digits = name.substr(before + 1, last - before - 1);
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::strtol(digits.c_str(), nullptr, 10);
}

bool process_is_gone(long pid) { return kill(pid_t(pid), 0) != 0 && errno == ESRCH; }

// Unlinks the engine's files in `claimed` and the folder itself; a line saying what happened.
std::string remove_claimed(const std::string& claimed, const std::string& shown, const Owner& owner) {
  uint64_t bytes = 0;
  size_t files = 0;
  for (const std::string& name : entries_of(claimed)) {
    const std::string path = claimed + "/" + name;
    struct stat info {};
    const bool ours = (ends_with(name, ".extent") || name == kOwnerFileName) && lstat(path.c_str(), &info) == 0 &&
                      S_ISREG(info.st_mode);
    if (!ours)
      return "nvme engine: \"" + shown + "\" (left by process " + std::to_string(owner.pid) +
             ", no longer running) holds \"" + name + "\", which is not an engine file: left as \"" + claimed +
             "\" for you to look at";
    if (unlink(path.c_str()) == 0) {
      bytes += uint64_t(info.st_blocks) * 512;
      ++files;
    }
  }
  if (rmdir(claimed.c_str()) != 0)
    return "nvme engine: cannot remove \"" + claimed + "\": " + std::strerror(errno);
  const std::string size = bytes >= (uint64_t(1) << 20) ? std::to_string(bytes >> 20) + " MiB"
                                                         : std::to_string(bytes >> 10) + " KiB";
  return "nvme engine: removed \"" + shown + "\" (" + std::to_string(files) + " files, " + size +
         " on disk), left by process " + std::to_string(owner.pid) +
         " of this host, which is no longer running";
}

}  // namespace

void write_owner_file(const std::string& files_folder) {
  const std::string path = files_folder + "/" + kOwnerFileName;
  const std::string text = "host " + this_host() + "\npid " + std::to_string(getpid()) + "\n";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  const bool written = fd >= 0 && write(fd, text.data(), text.size()) == ssize_t(text.size());
  const int error = errno;
  if (fd >= 0) close(fd);
  if (!written)
    throw keel_support::StatusError(KEEL_ERR_IO, "nvme engine: writing \"" + path + "\" failed: " + std::strerror(error));
}

std::vector<std::string> remove_stale_folders(const std::string& folder) {
  std::vector<std::string> lines;
  const std::string host = this_host();
  for (const std::string& name : entries_of(folder)) {
    if (name.rfind(kFolderPrefix, 0) != 0 || name.find(".removing-") != std::string::npos) continue;
    const std::string path = folder + "/" + name;
    struct stat info {};
    if (lstat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) continue;
    Owner owner;
    if (!read_owner(path, owner)) {
      const long pid = pid_in_name(name);
      if (pid > 0 && process_is_gone(pid))
        lines.push_back("nvme engine: \"" + path + "\" has no owner file (an older Keel's, or another host's); if "
                        "no run uses it, remove it to free its space");
      continue;
    }
    if (owner.host != host || owner.pid == long(getpid()) || !process_is_gone(owner.pid)) continue;
    const std::string claimed = path + ".removing-" + std::to_string(getpid());
    if (rename(path.c_str(), claimed.c_str()) != 0) continue;  // another engine claimed it first
    lines.push_back(remove_claimed(claimed, path, owner));
  }
  return lines;
}

}  // namespace keel_offload
