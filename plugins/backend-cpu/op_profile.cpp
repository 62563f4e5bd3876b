// Per-op timing for the cpu backend; see op_profile.hpp.
#include "op_profile.hpp"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <utility>

namespace keel_backend_cpu {
namespace {

// The work the slot running on this thread has counted, while a Scope times it; null otherwise
// (the profile is off), so count_work costs a test.
thread_local OpProfile::Scope::Counted* counting = nullptr;

std::string format_line(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format_line(const char* fmt, ...) {
  char buffer[256];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buffer, sizeof buffer, fmt, args);
  va_end(args);
  return buffer;
}

}  // namespace

void count_work(double flops, double bytes) {
  if (!counting) return;
  counting->flops += flops;
  counting->bytes += bytes;
}

OpProfile::Scope::Scope(OpProfile* profile, const char* op)
    : profile_(profile), op_(op), start_(std::chrono::steady_clock::now()), outer_(counting) {
  counting = &counted_;
}

OpProfile::Scope::~Scope() {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  counting = outer_;
  profile_->record(op_, seconds, counted_.flops, counted_.bytes);
}

void OpProfile::record(const char* op, double seconds, double flops, double bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  Row& row = rows_[op];
  row.calls += 1;
  row.seconds += seconds;
  row.flops += flops;
  row.bytes += bytes;
}

std::vector<std::string> OpProfile::table(double peak_flops) const {
  std::vector<std::pair<std::string, Row>> rows;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    rows.assign(rows_.begin(), rows_.end());
  }
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  Row total;
  for (const auto& [op, row] : rows) {
    total.calls += row.calls;
    total.seconds += row.seconds;
    total.flops += row.flops;
    total.bytes += row.bytes;
  }
  std::vector<std::string> lines;
  lines.push_back(format_line("%-28s %8s %10s %9s %9s %9s %7s %8s", "op", "calls", "ms", "GFLOP", "GB", "GFLOP/s",
                              "%peak", "GB/s"));
  auto line = [&](const std::string& op, const Row& row) {
    const double s = std::max(row.seconds, 1e-12);
    const std::string rate = row.flops > 0 ? format_line("%9.1f", row.flops / s / 1e9) : format_line("%9s", "-");
    const std::string share = row.flops > 0 && peak_flops > 0
                                  ? format_line("%6.1f%%", 100.0 * row.flops / s / peak_flops)
                                  : format_line("%7s", "-");
    const std::string bandwidth = row.bytes > 0 ? format_line("%8.1f", row.bytes / s / 1e9) : format_line("%8s", "-");
    lines.push_back(format_line("%-28s %8lld %10.3f %9.3f %9.3f ", op.c_str(), static_cast<long long>(row.calls),
                                row.seconds * 1e3, row.flops / 1e9, row.bytes / 1e9) +
                    rate + " " + share + " " + bandwidth);
  };
  for (const auto& [op, row] : rows) line(op, row);
  line("total", total);
  return lines;
}

}  // namespace keel_backend_cpu
