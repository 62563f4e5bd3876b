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

// Rewrites the file without the records whose "step" is past `resumed_step`, line by line into a
// temporary beside it (with the file's permissions) renamed over it, so a crash leaves the old
// file or the new one; a symlink's target is what is rewritten. Lines that are not such records
// (not JSON, no integer step) are kept: nothing is dropped that is not known to be repeated.
// Only a regular file is rewritten: a pipe or terminal given as metrics_path is left alone.
void drop_records_after(const std::string& path, int64_t resumed_step) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path file = fs::canonical(path, error);
  if (error || !fs::is_regular_file(file, error)) return;  // no file yet, or not one to rewrite
  std::ifstream in(file);
  if (!in) return;
  const fs::path temporary = file.string() + ".resuming";
  std::ofstream out(temporary, std::ios::trunc);
  bool dropped = false;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_object() && record.contains("step") && record["step"].is_number_integer() &&
        record["step"].get<int64_t>() > resumed_step) {
      dropped = true;
      continue;
    }
    out << line << '\n';
  }
  out.flush();
  const bool written = static_cast<bool>(out);
  out.close();
  if (!dropped || !written) {
    fs::remove(temporary, error);
    if (!written) throw KeelError(KEEL_ERR_IO, "train.metrics_path: cannot rewrite " + path + " for the resumed run");
    return;
  }
  fs::permissions(temporary, fs::status(file, error).permissions(), error);
  fs::rename(temporary, file, error);
  if (error) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw KeelError(KEEL_ERR_IO, "train.metrics_path: cannot replace " + path + ": " + error.message());
  }
}

}  // namespace

MetricsLog::MetricsLog(const std::string& path, bool append, int64_t resumed_step) : path_(path) {
  std::error_code error;
  auto folder = std::filesystem::path(path).parent_path();
  if (!folder.empty()) std::filesystem::create_directories(folder, error);
  if (append) drop_records_after(path, resumed_step);
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
