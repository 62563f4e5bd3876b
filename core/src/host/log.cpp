// Logger: one mutex so lines from threads and plugins never interleave.
#include "host/log.h"

#include <atomic>
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

namespace {
int32_t log_rank = 0, log_size = 1;
}

void set_log_rank(int32_t rank, int32_t size) { log_rank = rank, log_size = size; }

namespace {
std::atomic<int32_t>& threshold() {
  static std::atomic<int32_t> value{threshold_from_environment()};
  return value;
}
}  // namespace

void set_log_threshold(int32_t level) { threshold() = level; }

void log_line(int32_t level, const char* source, const std::string& message) {
  static std::mutex mutex;
  if (level < threshold() || (log_rank != 0 && level < KEEL_LOG_WARN)) return;
  std::lock_guard<std::mutex> lock(mutex);
  if (log_size > 1)
    std::fprintf(stderr, "[rank %d/%d] [%s] %s: %s\n", log_rank, log_size, source ? source : "plugin", level_name(level),
                 message.c_str());
  else
    std::fprintf(stderr, "[%s] %s: %s\n", source ? source : "plugin", level_name(level), message.c_str());
  std::fflush(stderr);
}

}  // namespace keel
