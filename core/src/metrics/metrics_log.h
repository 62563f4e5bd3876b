// The metrics file: one JSON object per logged step (JSONL), flushed as written so a crash
// keeps every line before it. A fresh run starts the file anew; a resumed run appends, after
// dropping the records of steps past the checkpoint it resumed from (a run that went on past its
// last save and stopped logged steps the resumed run logs again). A write that does not reach
// the file (ENOSPC, EIO) throws KeelError naming the file and the reason.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <string>

namespace keel {

class MetricsLog {
 public:
  // append: keep the file, without its records of steps after `resumed_step`.
  MetricsLog(const std::string& path, bool append, int64_t resumed_step = INT64_MAX);
  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace keel
