// The metrics file: one JSON object per logged step (JSONL), flushed as written so a crash
// keeps every line before it. A fresh run starts the file anew; a resumed run appends. A write
// that does not reach the file (ENOSPC, EIO) throws KeelError naming the file and the reason.
#pragma once

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

namespace keel {

class MetricsLog {
 public:
  MetricsLog(const std::string& path, bool append);
  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace keel
