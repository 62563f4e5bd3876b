// The pieces behind `keel plot`: tick choice, the data-to-pixel map, the SVG polylines, and the
// command's refusals.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "plot/chart.h"
#include "plot/plot.h"
#include "plot/svg_chart.h"

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

TEST(Svg, EachSeriesIsOnePolylineThroughTheMappedPoints) {
  Chart chart{"t", "step", "loss", {{"loss", {10, 20, 30}, {4.0, 3.0, 2.0}, {0, 0, 255}}}};
  const Layout l = layout_chart(chart, 800, 500);
  const std::string svg = render_svg(chart, l);
  char expected[128];
  std::snprintf(expected, sizeof expected, "<polyline id=\"loss\" points=\"%.2f,%.2f %.2f,%.2f %.2f,%.2f\"", l.px(10),
                l.py(4.0), l.px(20), l.py(3.0), l.px(30), l.py(2.0));
  EXPECT_NE(svg.find(expected), std::string::npos) << svg;
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
  EXPECT_EQ(plot_command({(dir / "one.jsonl").string(), "--out", (dir / "a.png").string()}, out, err), 2);
  EXPECT_NE(err.str().find("keel plot writes SVG only"), std::string::npos) << err.str();
  EXPECT_NE(err.str().find("keel.plot_metrics"), std::string::npos) << err.str();
  EXPECT_FALSE(fs::exists(dir / "a.png"));
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
