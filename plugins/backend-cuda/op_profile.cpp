// Per-op GPU timing for the cuda backend; see op_profile.hpp.
#include "op_profile.hpp"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <utility>

namespace keel_cuda {
namespace {

constexpr size_t kDrainAt = 4096;  // pending event pairs read back at once

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

OpProfile::~OpProfile() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Pending& p : pending_) {
    cudaEventDestroy(p.start);
    cudaEventDestroy(p.stop);
  }
  for (cudaEvent_t e : spare_) cudaEventDestroy(e);
}

cudaEvent_t OpProfile::take_event() {
  if (!spare_.empty()) {
    cudaEvent_t e = spare_.back();
    spare_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  cudaEventCreate(&e);
  return e;
}

OpProfile::Timing OpProfile::begin(const char* op) {
  std::lock_guard<std::mutex> lock(mutex_);
  const Timing timing{op, take_event()};
  cudaEventRecord(timing.start, stream_);
  return timing;
}

void OpProfile::end(const Timing& timing, double flops) {
  std::lock_guard<std::mutex> lock(mutex_);
  cudaEvent_t stop = take_event();
  cudaEventRecord(stop, stream_);
  pending_.push_back(Pending{timing.op, timing.start, stop, flops});
  if (pending_.size() >= kDrainAt) drain();
}

void OpProfile::cancel(const Timing& timing) {
  std::lock_guard<std::mutex> lock(mutex_);
  spare_.push_back(timing.start);
}

void OpProfile::drain() {
  for (const Pending& p : pending_) {
    float ms = 0.0f;
    if (cudaEventSynchronize(p.stop) == cudaSuccess && cudaEventElapsedTime(&ms, p.start, p.stop) == cudaSuccess) {
      Row& row = rows_[p.op];
      row.calls += 1;
      row.ms += ms;
      row.flops += p.flops;
    } else {
      cudaGetLastError();  // a failed op's events: its error was reported by the op itself
    }
    spare_.push_back(p.start);
    spare_.push_back(p.stop);
  }
  pending_.clear();
}

std::vector<std::string> OpProfile::table(double peak_flops) {
  std::vector<std::pair<std::string, Row>> rows;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    drain();
    rows.assign(rows_.begin(), rows_.end());
  }
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  Row total;
  for (const auto& [op, row] : rows) {
    total.calls += row.calls;
    total.ms += row.ms;
    total.flops += row.flops;
  }
  std::vector<std::string> lines;
  lines.push_back(format_line("%-28s %8s %11s %7s %10s %9s %7s", "op", "calls", "GPU ms", "share", "TFLOP", "TFLOP/s",
                              "%peak"));
  auto line = [&](const std::string& op, const Row& row) {
    const double s = std::max(row.ms, 1e-9) / 1e3;
    const std::string rate = row.flops > 0 ? format_line("%9.1f", row.flops / s / 1e12) : format_line("%9s", "-");
    const std::string share = row.flops > 0 && peak_flops > 0
                                  ? format_line("%6.1f%%", 100.0 * row.flops / s / peak_flops)
                                  : format_line("%7s", "-");
    lines.push_back(format_line("%-28s %8lld %11.3f %6.1f%% %10.3f ", op.c_str(), static_cast<long long>(row.calls),
                                row.ms, total.ms > 0 ? 100.0 * row.ms / total.ms : 0.0, row.flops / 1e12) +
                    rate + " " + share);
  };
  for (const auto& [op, row] : rows) line(op, row);
  line("total", total);
  return lines;
}

}  // namespace keel_cuda
