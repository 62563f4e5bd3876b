// A line chart as data: series in data units, and the layout that maps them to pixels with
// "nice" ticks (1, 2 or 5 × 10^k). The SVG renderer (svg_chart.h) draws from this.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel::chart {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
};

struct Series {
  std::string name;             // shown in the legend
  std::vector<double> x, y;     // same length, x increasing
  Rgb colour;
  bool markers = false;         // a dot at each point (sparse series such as validation loss)
};

struct Chart {
  std::string title, x_label, y_label;
  std::vector<Series> series;
};

struct Tick {
  double value = 0;
  std::string label;
};

// Where everything goes, in pixels from the top-left corner.
struct Layout {
  int width = 800, height = 500;
  int plot_left = 0, plot_right = 0, plot_top = 0, plot_bottom = 0;  // the frame around the plot area
  double x_min = 0, x_max = 1, y_min = 0, y_max = 1;                 // data range the frame spans
  std::vector<Tick> x_ticks, y_ticks;
  double px(double x) const;  // data x → pixel column
  double py(double y) const;  // data y → pixel row (larger y is higher up)
};

Layout layout_chart(const Chart& chart, int width, int height);

// Values of the form m × 10^k (m in 1, 2, 5) inside [lo, hi], about `target` of them, at least
// `min_step` apart (1 for steps, which are whole numbers).
std::vector<Tick> nice_ticks(double lo, double hi, int target, double min_step = 0);

// The chart's colours.
inline constexpr Rgb kBackground{255, 255, 255}, kFrame{0, 0, 0}, kGrid{225, 225, 225}, kText{60, 60, 60};

}  // namespace keel::chart
