// The file and its records; the encoding lives in tensorboard_event.cpp. A flush that does not
// reach the file ends the run, as a metrics write does (metrics_log.cpp says why).
#include "metrics/tensorboard_writer.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "host/errors.h"
#include "metrics/tensorboard_event.h"

namespace keel {
namespace {

double unix_seconds_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == 0) return "localhost";
  return name;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error)
    throw KeelError(KEEL_ERR_IO, "train.tensorboard_dir: cannot create " + dir + ": " + error.message() +
                                     " (set train.tensorboard_dir to \"none\" to write no events)");
  const double now = unix_seconds_now();
  path_ = (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(int64_t(now)) + "." + host_name() +
                                         "." + std::to_string(getpid()) + ".keel"))
              .string();
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) throw KeelError(KEEL_ERR_IO, "train.tensorboard_dir: cannot write " + path_);
  out_ << tfrecord_frame(encode_file_version_event(now));
  flush();
}

void TensorBoardWriter::scalar(int64_t step, const std::string& tag, double value) {
  out_ << tfrecord_frame(encode_scalar_event(unix_seconds_now(), step, tag, float(value)));
}

void TensorBoardWriter::flush() {
  errno = 0;
  out_.flush();
  if (!out_) {
    const int reason = errno;
    throw KeelError(KEEL_ERR_IO, "train.tensorboard_dir: writing " + path_ + " failed: " +
                                     (reason ? std::strerror(reason) : "I/O error") +
                                     " (set train.tensorboard_dir to \"none\" to write no events)");
  }
}

}  // namespace keel
