// Logger: one mutex so lines from threads and plugins never interleave.
#include "host/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace keel {
namespace {

int32_t threshold_from_environment() {
  const char* level = std::getenv("KEEL_LOG_LEVEL");
  if (!level) return KEEL_LOG_INFO;
  if (!std::strcmp(level, "debug")) return KEEL_LOG_DEBUG;
  if (!std::strcmp(level, "warn")) return KEEL_LOG_WARN;
  if (!std::strcmp(level, "error")) return KEEL_LOG_ERROR;
  return KEEL_LOG_INFO;
}

const char* level_name(int32_t level) {
  switch (level) {
    case KEEL_LOG_DEBUG: return "debug";
    case KEEL_LOG_WARN: return "warning";
    case KEEL_LOG_ERROR: return "error";
    default: return "info";
  }
}

}  // namespace

void log_line(int32_t level, const char* source, const std::string& message) {
  static const int32_t threshold = threshold_from_environment();
  static std::mutex mutex;
  if (level < threshold) return;
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stderr, "[%s] %s: %s\n", source ? source : "plugin", level_name(level), message.c_str());
  std::fflush(stderr);
}

}  // namespace keel
