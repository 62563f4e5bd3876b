// The pieces behind `keel plot`: tick choice, the data-to-pixel map, the rasterizer, the PNG
// container, and the command's refusals.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "metrics/chart/chart.h"
#include "metrics/chart/png_file.h"
#include "metrics/chart/raster.h"
#include "metrics/plot.h"

namespace keel::chart {
namespace {

std::vector<std::string> labels(const std::vector<Tick>& ticks) {
  std::vector<std::string> out;
  for (const Tick& t : ticks) out.push_back(t.label);
  return out;
}

TEST(NiceTicks, StepsOfOneTwoFive) {
  // (6.2 - 1.8) / 5 = 0.88 → the next of 1, 2, 5 × 10^k is 1.
  EXPECT_EQ(labels(nice_ticks(1.8, 6.2, 5)), (std::vector<std::string>{"2", "3", "4", "5", "6"}));
  // 0.3 / 6 = 0.05 → step 0.05, two decimals.
  EXPECT_EQ(labels(nice_ticks(2.0, 2.3, 6)), (std::vector<std::string>{"2.00", "2.05", "2.10", "2.15", "2.20", "2.25", "2.30"}));
  // Steps are whole numbers: 1..3 in 8 ticks would be 0.5 apart, min_step keeps it at 1.
  EXPECT_EQ(labels(nice_ticks(1, 3, 8, 1.0)), (std::vector<std::string>{"1", "2", "3"}));
}

TEST(Layout, MapsTheDataRangeOntoTheFrame) {
  Chart chart{"t", "step", "loss", {{"loss", {10, 20, 30}, {4.0, 3.0, 2.0}, {0, 0, 255}}}};
  const Layout l = layout_chart(chart, 800, 500);
  EXPECT_DOUBLE_EQ(l.px(10), l.plot_left);
  EXPECT_DOUBLE_EQ(l.px(30), l.plot_right);
  // y is padded by 5% of the range 2: the frame spans 1.9..4.1, and larger values sit higher.
  EXPECT_DOUBLE_EQ(l.y_min, 1.9);
  EXPECT_DOUBLE_EQ(l.y_max, 4.1);
  EXPECT_LT(l.py(4.0), l.py(2.0));
  EXPECT_NEAR(l.py(3.0), (l.plot_top + l.plot_bottom) / 2.0, 1e-9);
}

TEST(Raster, LineCoversBothEndsAndItsThickness) {
  Image image(20, 10, {255, 255, 255});
  const Rgb red{255, 0, 0};
  image.draw_line(2, 3, 15, 7, red, 2);
  EXPECT_EQ(image.at(2, 3).r, 255);
  EXPECT_EQ(image.at(2, 3).g, 0);
  EXPECT_EQ(image.at(15, 7).g, 0);
  EXPECT_EQ(image.at(16, 8).g, 0);   // 2 px thick: the brush covers (x, y)..(x+1, y+1)
  EXPECT_EQ(image.at(0, 0).g, 255);  // untouched
}

TEST(Raster, TextUsesTheGlyphs) {
  Image image(12, 8, {255, 255, 255});
  image.draw_text(0, 0, "1", {0, 0, 0});
  // '1' has a full vertical stroke in its middle column (0x7F: rows 0-6) and nothing in column 0.
  for (int row = 0; row < 7; ++row) EXPECT_EQ(image.at(2, row).r, 0) << row;
  for (int row = 0; row < 8; ++row) EXPECT_EQ(image.at(0, row).r, 255) << row;
  EXPECT_EQ(Image::text_width("loss"), 23);  // 4 glyphs × 6 - the last gap
}

TEST(Png, ContainerLayout) {
  Image image(3, 2, {1, 2, 3});
  const std::string png = encode_png(image);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(png.substr(8, 8), std::string("\0\0\0\x0dIHDR", 8));  // 13-byte header chunk
  EXPECT_EQ(png.substr(16, 8), std::string("\0\0\0\x03\0\0\0\x02", 8));  // width 3, height 2, big-endian
  EXPECT_EQ(png.substr(24, 5), std::string("\x08\x02\0\0\0", 5));  // 8-bit RGB, deflate, no interlace
  EXPECT_EQ(png.substr(png.size() - 12), std::string("\0\0\0\0IEND\xae\x42\x60\x82", 12));  // IEND's fixed CRC
}

TEST(PlotCommand, RefusesWithMessagesThatNameTheFile) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "keel_plot_unit_test";
  fs::create_directories(dir);
  std::ostringstream out, err;
  EXPECT_EQ(plot_command({(dir / "missing.jsonl").string(), "--out", (dir / "a.svg").string()}, out, err), 1);
  EXPECT_NE(err.str().find("missing.jsonl: cannot open the metrics file: No such file"), std::string::npos) << err.str();

  std::ofstream((dir / "empty.jsonl").string()) << "{\"note\": 1}\n";
  err.str("");
  EXPECT_EQ(plot_command({(dir / "empty.jsonl").string(), "--out", (dir / "a.svg").string()}, out, err), 1);
  EXPECT_NE(err.str().find("empty.jsonl: no records"), std::string::npos) << err.str();

  std::ofstream((dir / "one.jsonl").string()) << "{\"step\": 1, \"loss\": 2.5}\n";
  err.str("");
  EXPECT_EQ(plot_command({(dir / "one.jsonl").string(), "--out", (dir / "a.jpg").string()}, out, err), 2);
  EXPECT_NE(err.str().find("unknown image format '.jpg'"), std::string::npos) << err.str();
  err.str("");
  EXPECT_EQ(plot_command({(dir / "one.jsonl").string()}, out, err), 2);
  EXPECT_NE(err.str().find("--out"), std::string::npos) << err.str();
  fs::remove_all(dir);
}

TEST(PlotCommand, RefusesAnAxisWiderThanADouble) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "keel_plot_axis_unit_test";
  fs::create_directories(dir);
  const std::string metrics = (dir / "wide.jsonl").string(), svg = (dir / "wide.svg").string();
  std::ofstream(metrics) << "{\"step\": 1, \"loss\": 1e308}\n{\"step\": 2, \"val_loss\": -1e308}\n";
  std::ostringstream out, err;
  EXPECT_EQ(plot_command({metrics, "--out", svg}, out, err), 1);
  EXPECT_NE(err.str().find("wide.jsonl: the loss axis would span -1e+308 to 1e+308, a width that is not a finite number"),
            std::string::npos) << err.str();
  EXPECT_FALSE(fs::exists(svg)) << "a chart with NaN coordinates was written";
  // The widest finite span still draws: 0 to 1e307 pads to a finite axis.
  std::ofstream(metrics) << "{\"step\": 1, \"loss\": 0}\n{\"step\": 2, \"loss\": 1e307}\n";
  err.str("");
  EXPECT_EQ(plot_command({metrics, "--out", svg}, out, err), 0) << err.str();
  std::ifstream written(svg);
  const std::string text((std::istreambuf_iterator<char>(written)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.find("nan"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace keel::chart
