// JSONL writer; creates the folder it needs. A record that cannot be written (a full disk,
// a quota, an I/O error) ends the run with the file and the system's reason: a run whose
// metrics silently stop is worse than one that stops and says why.
#include "metrics/metrics_log.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "host/errors.h"

namespace keel {

MetricsLog::MetricsLog(const std::string& path, bool append) : path_(path) {
  std::error_code error;
  auto folder = std::filesystem::path(path).parent_path();
  if (!folder.empty()) std::filesystem::create_directories(folder, error);
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  if (!out_) throw KeelError(KEEL_ERR_IO, "train.metrics_path: cannot write " + path);
}

void MetricsLog::write(const nlohmann::json& record) {
  errno = 0;
  out_ << record.dump() << '\n';
  out_.flush();
  if (!out_) {
    const int reason = errno;
    throw KeelError(KEEL_ERR_IO, "train.metrics_path: writing " + path_ + " failed: " +
                                     (reason ? std::strerror(reason) : "I/O error") + " (the metrics of step " +
                                     record.value("step", nlohmann::json()).dump() + " are not on disk)");
  }
}

}  // namespace keel
