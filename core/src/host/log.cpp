// Logger: one mutex so lines from threads and plugins never interleave, one write(2) per line so
// processes sharing stderr cannot split one either.
#include "host/log.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
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

namespace {
std::atomic<bool> progress_line_open{false};
}

void set_progress_line_open(bool open) { progress_line_open = open; }
bool progress_line_is_open() { return progress_line_open; }

void write_stderr_line(const std::string& line) {
  // The bar is on stdout and this line on stderr: a newline of its own, in the same write, puts the
  // line below the bar whichever stream a launcher forwards first. The bar's next redraw starts
  // on the fresh line.
  const std::string text = (progress_line_open.exchange(false) ? "\n" : "") + line + "\n";
  std::fflush(stderr);  // anything stdio still holds goes first
  for (size_t written = 0; written < text.size();) {
    const ssize_t n = ::write(STDERR_FILENO, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    written += size_t(n);
  }
}

void log_line(int32_t level, const char* source, const std::string& message) {
  static std::mutex mutex;
  if (level < threshold() || (log_rank != 0 && level < KEEL_LOG_WARN)) return;
  std::lock_guard<std::mutex> lock(mutex);
  std::string line;
  if (log_size > 1) line = "[rank " + std::to_string(log_rank) + "/" + std::to_string(log_size) + "] ";
  line += std::string("[") + (source ? source : "plugin") + "] " + level_name(level) + ": " + message;
  write_stderr_line(line);
}

}  // namespace keel
