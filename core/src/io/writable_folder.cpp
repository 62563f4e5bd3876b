// The probe is a real create-write-close-unlink, not access(2): access answers for the real
// user, says yes to root whatever the mode bits, and knows nothing of quotas or a full disk.
#include "io/writable_folder.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "host/errors.h"

namespace keel {

void require_writable_folder(const std::string& folder, const std::string& json_path) {
  auto fail = [&](const std::string& reason) {
    throw KeelError(KEEL_ERR_IO, json_path + ": cannot write " + folder + ": " + reason +
                                     " (checked before the first step, so no training is lost)");
  };
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  if (error) fail(error.message());
  char host[64] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string probe = (std::filesystem::path(folder) / (".keel-write-probe-" + std::string(host) + "-" +
                                                              std::to_string(::getpid())))
                                .string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail(std::strerror(errno));
  const char byte = 'k';
  const bool wrote = ::write(fd, &byte, 1) == 1;
  const int write_errno = errno;
  const bool closed = ::close(fd) == 0;
  const int close_errno = errno;
  ::unlink(probe.c_str());
  if (!wrote) fail(std::strerror(write_errno));
  if (!closed) fail(std::strerror(close_errno));
}

}  // namespace keel
