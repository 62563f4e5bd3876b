// Ranges, margins and ticks. The y range is padded by 5% so a curve never runs along the frame.
#include "plot/chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace keel::chart {

double Layout::px(double x) const {
  return plot_left + (x - x_min) / (x_max - x_min) * double(plot_right - plot_left);
}

double Layout::py(double y) const {
  return plot_bottom - (y - y_min) / (y_max - y_min) * double(plot_bottom - plot_top);
}

std::vector<Tick> nice_ticks(double lo, double hi, int target, double min_step) {
  const double raw = (hi - lo) / std::max(target, 1);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * magnitude >= raw) {
      step = m * magnitude;
      break;
    }
  step = std::max(step, min_step);
  const int decimals = std::max(0, -int(std::floor(std::log10(step) + 1e-9)));
  std::vector<Tick> ticks;
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + 1e-9 * step; v += step) {
    const double value = std::abs(v) < step * 1e-9 ? 0.0 : v;
    char label[32];
    std::snprintf(label, sizeof label, "%.*f", decimals, value);
    ticks.push_back({value, label});
  }
  return ticks;
}

Layout layout_chart(const Chart& chart, int width, int height) {
  Layout l;
  l.width = width;
  l.height = height;
  l.plot_left = 72;
  l.plot_right = width - 24;
  l.plot_top = 56;
  l.plot_bottom = height - 52;
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
  for (const Series& s : chart.series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      x_lo = std::min(x_lo, s.x[i]);
      x_hi = std::max(x_hi, s.x[i]);
      y_lo = std::min(y_lo, s.y[i]);
      y_hi = std::max(y_hi, s.y[i]);
    }
  if (!(x_lo <= x_hi)) x_lo = 0, x_hi = 1;  // no points at all
  if (!(y_lo <= y_hi)) y_lo = 0, y_hi = 1;
  if (x_hi - x_lo < 1e-12) x_lo -= 1, x_hi += 1;
  if (y_hi - y_lo < 1e-12 * std::max(1.0, std::abs(y_hi))) {
    const double pad = std::max(0.5, std::abs(y_hi) * 0.1);
    y_lo -= pad, y_hi += pad;
  }
  const double y_pad = 0.05 * (y_hi - y_lo);
  l.x_min = x_lo, l.x_max = x_hi;
  l.y_min = y_lo - y_pad, l.y_max = y_hi + y_pad;
  l.x_ticks = nice_ticks(l.x_min, l.x_max, 8, 1.0);
  l.y_ticks = nice_ticks(l.y_min, l.y_max, 6);
  return l;
}

}  // namespace keel::chart
