// JSONL writer; creates the folder it needs. A record that cannot be written (a full disk,
// a quota, an I/O error) ends the run with the file and the system's reason: a run whose
// metrics silently stop is worse than one that stops and says why.
#include "metrics/metrics_log.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "host/errors.h"

namespace keel {

namespace {

// Rewrites the file without the records whose "step" is past `resumed_step` (through a temporary
// file renamed over it, so a crash leaves the old file or the new one). Lines that are not such
// records (not JSON, no step) are kept: nothing is dropped that is not known to be repeated.
void drop_records_after(const std::string& path, int64_t resumed_step) {
  std::ifstream in(path);
  if (!in) return;  // no file yet: nothing to drop
  std::string kept, line;
  bool dropped = false;
  while (std::getline(in, line)) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_object() && record.contains("step") && record["step"].is_number_integer() &&
        record["step"].get<int64_t>() > resumed_step) {
      dropped = true;
      continue;
    }
    kept += line + '\n';
  }
  if (!dropped) return;
  const std::string temporary = path + ".resuming";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << kept;
    out.flush();
    if (!out) throw KeelError(KEEL_ERR_IO, "train.metrics_path: cannot rewrite " + path + " for the resumed run");
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error)
    throw KeelError(KEEL_ERR_IO, "train.metrics_path: cannot replace " + path + ": " + error.message());
}

}  // namespace

MetricsLog::MetricsLog(const std::string& path, bool append, int64_t resumed_step) : path_(path) {
  std::error_code error;
  auto folder = std::filesystem::path(path).parent_path();
  if (!folder.empty()) std::filesystem::create_directories(folder, error);
  if (append && path != "/dev/null") drop_records_after(path, resumed_step);
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
