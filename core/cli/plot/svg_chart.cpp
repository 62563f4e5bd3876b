// Written with snprintf into one string; coordinates to 0.01 px.
#include "plot/svg_chart.h"

#include <algorithm>
#include <cstdio>

namespace keel::chart {
namespace {

std::string hex(Rgb c) {
  char text[8];
  std::snprintf(text, sizeof text, "#%02x%02x%02x", c.r, c.g, c.b);
  return text;
}

std::string escape_xml(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

std::string format(const char* pattern, double a, double b, double c = 0, double d = 0) {
  char text[160];
  std::snprintf(text, sizeof text, pattern, a, b, c, d);
  return text;
}

void text(std::string& svg, double x, double y, const char* anchor, int size, const std::string& content) {
  svg += format("<text x=\"%.2f\" y=\"%.2f\"", x, y) + " text-anchor=\"" + anchor + "\" font-size=\"" +
         std::to_string(size) + "\" fill=\"" + hex(kText) + "\">" + escape_xml(content) + "</text>\n";
}

void line(std::string& svg, double x1, double y1, double x2, double y2, Rgb colour) {
  svg += format("<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"", x1, y1, x2, y2) + " stroke=\"" +
         hex(colour) + "\"/>\n";
}

}  // namespace

std::string render_svg(const Chart& chart, const Layout& l) {
  const double left = l.plot_left, right = l.plot_right, top = l.plot_top, bottom = l.plot_bottom;
  std::string svg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    std::to_string(l.width) + "\" height=\"" + std::to_string(l.height) + "\" viewBox=\"0 0 " +
                    std::to_string(l.width) + " " + std::to_string(l.height) + "\" font-family=\"sans-serif\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"" + hex(kBackground) + "\"/>\n";
  text(svg, l.width / 2.0, 24, "middle", 16, chart.title);
  // Each tick is a group of its grid line and its label, so a reader can map pixels back to data.
  for (const Tick& t : l.y_ticks) {
    svg += "<g class=\"tick-y\">\n";
    line(svg, left, l.py(t.value), right, l.py(t.value), kGrid);
    text(svg, left - 6, l.py(t.value) + 4, "end", 12, t.label);
    svg += "</g>\n";
  }
  for (const Tick& t : l.x_ticks) {
    svg += "<g class=\"tick-x\">\n";
    line(svg, l.px(t.value), top, l.px(t.value), bottom, kGrid);
    text(svg, l.px(t.value), bottom + 18, "middle", 12, t.label);
    svg += "</g>\n";
  }
  svg += format("<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"", left, top, right - left, bottom - top) +
         " fill=\"none\" stroke=\"" + hex(kFrame) + "\"/>\n";
  text(svg, (left + right) / 2, l.height - 12, "middle", 13, chart.x_label);
  text(svg, left, top - 10, "start", 13, chart.y_label);

  // A row above the plot for up to three series; more stack in a column at the plot's top right.
  const bool column = chart.series.size() > 3;
  size_t longest = 0;
  for (const Series& s : chart.series) longest = std::max(longest, s.name.size());
  double legend_x = column ? right - 40.0 - 7.0 * double(longest) : right - 110.0 * double(chart.series.size());
  double legend_y = column ? top + 20.0 : top - 10.0;
  if (column)
    svg += format("<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"", legend_x - 6, top + 6,
                  34.0 + 7.0 * double(longest), 16.0 * double(chart.series.size()) + 6) +
           " fill=\"" + hex(kBackground) + "\" fill-opacity=\"0.85\" stroke=\"" + hex(kGrid) + "\"/>\n";
  for (const Series& s : chart.series) {
    std::string points;
    for (size_t i = 0; i < s.x.size(); ++i) points += format(i ? " %.2f,%.2f" : "%.2f,%.2f", l.px(s.x[i]), l.py(s.y[i]));
    svg += "<polyline id=\"" + escape_xml(s.name) + "\" points=\"" + points + "\" fill=\"none\" stroke=\"" +
           hex(s.colour) + "\" stroke-width=\"2\" stroke-linejoin=\"round\"/>\n";
    if (s.markers || s.x.size() == 1)
      for (size_t i = 0; i < s.x.size(); ++i)
        svg += format("<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\"", l.px(s.x[i]), l.py(s.y[i])) + " fill=\"" +
               hex(s.colour) + "\"/>\n";
    svg += format("<rect x=\"%.2f\" y=\"%.2f\" width=\"24\" height=\"2\"", legend_x, legend_y - 5) + " fill=\"" +
           hex(s.colour) + "\"/>\n";
    text(svg, legend_x + 30, legend_y, "start", 12, s.name);
    if (column)
      legend_y += 16;
    else
      legend_x += 110;
  }
  return svg + "</svg>\n";
}

}  // namespace keel::chart
