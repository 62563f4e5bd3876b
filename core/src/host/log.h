// The one logger of the core and of every plugin (through the host table): lines on stderr,
// prefixed with the rank once ranks exist, filtered by KEEL_LOG_LEVEL (debug|info|warn|error).
#pragma once

#include <keel/host.h>

#include <string>

namespace keel {

void log_line(int32_t level, const char* source, const std::string& message);
// Once the mesh exists: lines carry "rank R/N", and only rank 0 logs below warnings.
void set_log_rank(int32_t rank, int32_t size);
// The least severe level printed from now on (KEEL_LOG_*); KEEL_LOG_LEVEL's until set.
void set_log_threshold(int32_t level);
inline void log_info(const std::string& message) { log_line(KEEL_LOG_INFO, "keel", message); }
inline void log_warn(const std::string& message) { log_line(KEEL_LOG_WARN, "keel", message); }

}  // namespace keel
