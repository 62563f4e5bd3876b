// The one logger of the core and of every plugin (through the host table): lines on stderr,
// prefixed with the rank once ranks exist, filtered by KEEL_LOG_LEVEL (debug|info|warn|error).
// Every line reaches stderr whole in one write(2), so the lines of ranks that share a terminal
// (or a launcher's forwarding) never mix mid-line, and on a fresh line: a progress bar left open
// on the terminal is ended first.
#pragma once

#include <keel/host.h>

#include <string>

namespace keel {

void log_line(int32_t level, const char* source, const std::string& message);
// Once the mesh exists: lines carry "rank R/N", and only rank 0 logs below warnings.
void set_log_rank(int32_t rank, int32_t size);
// The least severe level printed from now on (KEEL_LOG_*); KEEL_LOG_LEVEL's until set.
void set_log_threshold(int32_t level);
// Writes `line` and a newline to stderr in one write(2), after ending the progress bar's line if
// it is open: for messages outside the logger's format (a command's final error, a rank's abort).
void write_stderr_line(const std::string& line);
// The progress bar (metrics/run_reporter) says whether its line is open on the terminal: drawn,
// with the cursor at its end.
void set_progress_line_open(bool open);
bool progress_line_is_open();
inline void log_info(const std::string& message) { log_line(KEEL_LOG_INFO, "keel", message); }
inline void log_warn(const std::string& message) { log_line(KEEL_LOG_WARN, "keel", message); }

}  // namespace keel
