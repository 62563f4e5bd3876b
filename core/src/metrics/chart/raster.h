// An RGB image in memory and the few things a chart draws on it: rectangles, thick lines and
// text in the built-in bitmap font. No anti-aliasing: every pixel is exactly one of the colours
// drawn, which keeps images small and lets tests find a series by its colour.
#pragma once

#include <string>
#include <vector>

#include "metrics/chart/chart.h"

namespace keel::chart {

class Image {
 public:
  Image(int width, int height, Rgb background);
  int width() const { return width_; }
  int height() const { return height_; }
  const std::vector<uint8_t>& rgb() const { return rgb_; }  // row-major, 3 bytes a pixel
  Rgb at(int x, int y) const;

  void set(int x, int y, Rgb colour);  // ignores pixels outside the image
  void fill_rect(int x0, int y0, int x1, int y1, Rgb colour);  // inclusive corners
  // A line `thickness` pixels wide between two points given in pixels.
  void draw_line(double x0, double y0, double x1, double y1, Rgb colour, int thickness = 1);
  // Text whose top-left corner is (x, y); each font pixel becomes scale × scale pixels.
  void draw_text(int x, int y, const std::string& text, Rgb colour, int scale = 1);
  static int text_width(const std::string& text, int scale = 1);

 private:
  int width_, height_;
  std::vector<uint8_t> rgb_;
};

}  // namespace keel::chart
