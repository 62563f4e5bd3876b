// Drawing order: grid, series, frame and ticks, then text, so labels are never hidden. The
// legend sits above the frame, outside the plot area, where it cannot cover a curve.
#include "metrics/chart/png_chart.h"

#include <cmath>

#include "metrics/chart/bitmap_font.h"

namespace keel::chart {

Image render_raster(const Chart& chart, const Layout& l) {
  Image image(l.width, l.height, kBackground);
  const int left = l.plot_left, right = l.plot_right, top = l.plot_top, bottom = l.plot_bottom;
  for (const Tick& t : l.y_ticks) image.draw_line(left, l.py(t.value), right, l.py(t.value), kGrid);
  for (const Tick& t : l.x_ticks) image.draw_line(l.px(t.value), top, l.px(t.value), bottom, kGrid);

  for (const Series& s : chart.series) {
    for (size_t i = 1; i < s.x.size(); ++i)
      image.draw_line(l.px(s.x[i - 1]), l.py(s.y[i - 1]), l.px(s.x[i]), l.py(s.y[i]), s.colour, 2);
    if (s.markers || s.x.size() == 1)
      for (size_t i = 0; i < s.x.size(); ++i) {
        const int x = int(std::lround(l.px(s.x[i]))), y = int(std::lround(l.py(s.y[i])));
        image.fill_rect(x - 2, y - 2, x + 2, y + 2, s.colour);
      }
  }

  image.draw_line(left, top, right, top, kFrame);
  image.draw_line(left, bottom, right, bottom, kFrame);
  image.draw_line(left, top, left, bottom, kFrame);
  image.draw_line(right, top, right, bottom, kFrame);
  const int half_glyph = kGlyphHeight / 2;
  for (const Tick& t : l.y_ticks) {
    const int y = int(std::lround(l.py(t.value)));
    image.draw_line(left - 4, y, left, y, kFrame);
    image.draw_text(left - 7 - Image::text_width(t.label), y - half_glyph + 1, t.label, kText);
  }
  for (const Tick& t : l.x_ticks) {
    const int x = int(std::lround(l.px(t.value)));
    image.draw_line(x, bottom, x, bottom + 4, kFrame);
    image.draw_text(x - Image::text_width(t.label) / 2, bottom + 8, t.label, kText);
  }
  image.draw_text((l.width - Image::text_width(chart.title, 2)) / 2, 12, chart.title, kText, 2);
  image.draw_text((left + right - Image::text_width(chart.x_label)) / 2, l.height - 20, chart.x_label, kText);
  image.draw_text(left, top - 16, chart.y_label, kText);

  int legend_x = right - 110 * int(chart.series.size());
  for (const Series& s : chart.series) {
    image.fill_rect(legend_x, top - 13, legend_x + 23, top - 12, s.colour);
    image.draw_text(legend_x + 30, top - 16, s.name, kText);
    legend_x += 110;
  }
  return image;
}

}  // namespace keel::chart
