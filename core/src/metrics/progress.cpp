// Formatting only; the run loop decides when to print.
#include "metrics/progress.h"

#include <cstdio>

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
  if (p.val_loss >= 0 && n > 0 && size_t(n) < sizeof text)
    std::snprintf(text + n, sizeof text - size_t(n), " | val_loss %.4f", p.val_loss);
  return text;
}

}  // namespace keel
