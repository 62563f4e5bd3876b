// JSONL writer; creates the folder it needs.
#include "metrics/metrics_log.h"

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
  out_ << record.dump() << '\n';
  out_.flush();
}

}  // namespace keel
