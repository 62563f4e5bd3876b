// Formatting only; the run loop decides when to print.
#include "metrics/progress.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace keel {

std::string format_duration(double seconds) {
  if (seconds < 0) seconds = 0;
  const long total = long(seconds + 0.5);
  char text[32];
  std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", total / 3600, (total / 60) % 60, total % 60);
  return text;
}

std::string format_progress(const ProgressLine& p) {
  char text[320];
  const int digits = std::snprintf(nullptr, 0, "%lld", static_cast<long long>(p.total_steps));
  int n = std::snprintf(text, sizeof text,
                        "step %*lld/%lld | loss %.4f | lr %.2e | grad_norm %.3f | %.0f tok/s | MFU %.1f%% | %s elapsed | ETA %s",
                        digits, static_cast<long long>(p.step), static_cast<long long>(p.total_steps), p.loss, p.lr,
                        p.grad_norm, p.tokens_per_s, 100.0 * p.mfu, format_duration(p.elapsed_s).c_str(),
                        format_duration(p.eta_s).c_str());
  if (p.offload_read_GBps >= 0 && n > 0 && size_t(n) < sizeof text)
    n += std::snprintf(text + n, sizeof text - size_t(n), " | offload r %.2f w %.2f GB/s", p.offload_read_GBps,
                       p.offload_write_GBps);
  if (p.val_loss >= 0 && n > 0 && size_t(n) < sizeof text)
    std::snprintf(text + n, sizeof text - size_t(n), " | val_loss %.4f", p.val_loss);
  return text;
}

std::string format_count(double value) {
  char text[32];
  if (value < 999.5) std::snprintf(text, sizeof text, "%.0f", value);
  else if (value < 999.5e3) std::snprintf(text, sizeof text, value < 9.95e3 ? "%.1fk" : "%.0fk", value / 1e3);
  else if (value < 999.5e6) std::snprintf(text, sizeof text, value < 9.95e6 ? "%.1fM" : "%.0fM", value / 1e6);
  else std::snprintf(text, sizeof text, "%.1fG", value / 1e9);
  return text;
}

std::string format_progress_bar(const ProgressLine& p, int columns) {
  const int64_t total = std::max<int64_t>(p.total_steps, 1);
  const int64_t done = std::clamp<int64_t>(p.step, 0, total);
  const double mfu_percent = 100.0 * p.mfu;
  char text[256];
  std::snprintf(text, sizeof text, " %3lld%% step %lld/%lld loss %.3f | %s tok/s | MFU %.*f%% | ETA %s",
                static_cast<long long>(100 * done / total), static_cast<long long>(p.step),
                static_cast<long long>(p.total_steps), p.loss, format_count(p.tokens_per_s).c_str(),
                mfu_percent < 9.95 ? 1 : 0, mfu_percent, format_duration(p.eta_s).c_str());
  if (p.offload_read_GBps >= 0) {
    const size_t used = std::strlen(text);
    std::snprintf(text + used, sizeof text - used, " | tier r/w %.1f/%.1f GB/s", p.offload_read_GBps,
                  p.offload_write_GBps);
  }
  const int text_columns = int(std::strlen(text));
  const int cells = std::clamp(columns - 2 - text_columns, 10, 30);
  const int filled = int(cells * done / total);
  std::string line = "[" + std::string(size_t(filled), '#') + std::string(size_t(cells - filled), '.') + "]" + text;
  if (columns > 0 && line.size() > size_t(columns)) line.resize(size_t(columns));
  return line;
}

}  // namespace keel
