// Bresenham lines stamped with a square brush; glyphs copied pixel by pixel.
#include "metrics/chart/raster.h"

#include <cmath>
#include <cstdlib>

#include "metrics/chart/bitmap_font.h"

namespace keel::chart {

Image::Image(int width, int height, Rgb background)
    : width_(width), height_(height), rgb_(size_t(width) * size_t(height) * 3) {
  fill_rect(0, 0, width - 1, height - 1, background);
}

Rgb Image::at(int x, int y) const {
  const size_t i = (size_t(y) * size_t(width_) + size_t(x)) * 3;
  return {rgb_[i], rgb_[i + 1], rgb_[i + 2]};
}

void Image::set(int x, int y, Rgb colour) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
  const size_t i = (size_t(y) * size_t(width_) + size_t(x)) * 3;
  rgb_[i] = colour.r, rgb_[i + 1] = colour.g, rgb_[i + 2] = colour.b;
}

void Image::fill_rect(int x0, int y0, int x1, int y1, Rgb colour) {
  for (int y = y0; y <= y1; ++y)
    for (int x = x0; x <= x1; ++x) set(x, y, colour);
}

void Image::draw_line(double fx0, double fy0, double fx1, double fy1, Rgb colour, int thickness) {
  int x0 = int(std::lround(fx0)), y0 = int(std::lround(fy0));
  const int x1 = int(std::lround(fx1)), y1 = int(std::lround(fy1));
  const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
  const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
  const int before = (thickness - 1) / 2, after = thickness / 2;
  for (int error = dx + dy;;) {
    fill_rect(x0 - before, y0 - before, x0 + after, y0 + after, colour);
    if (x0 == x1 && y0 == y1) break;
    const int twice = 2 * error;
    if (twice >= dy) error += dy, x0 += sx;
    if (twice <= dx) error += dx, y0 += sy;
  }
}

void Image::draw_text(int x, int y, const std::string& text, Rgb colour, int scale) {
  for (char c : text) {
    const uint8_t* columns = glyph_columns(c);
    for (int col = 0; col < kGlyphWidth; ++col)
      for (int row = 0; row < kGlyphHeight; ++row)
        if (columns[col] >> row & 1)
          fill_rect(x + col * scale, y + row * scale, x + (col + 1) * scale - 1, y + (row + 1) * scale - 1, colour);
    x += kGlyphAdvance * scale;
  }
}

int Image::text_width(const std::string& text, int scale) {
  return text.empty() ? 0 : (int(text.size()) * kGlyphAdvance - 1) * scale;
}

}  // namespace keel::chart
