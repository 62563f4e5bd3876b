// The terminal bar's exact text: percentage, filled cells, humanised counts, and that it never
// grows past the columns it was given.
#include <gtest/gtest.h>

#include "metrics/progress.h"

namespace keel {
namespace {

ProgressLine line_at(int64_t step, int64_t total) {
  ProgressLine p;
  p.step = step;
  p.total_steps = total;
  p.loss = 2.31;
  p.tokens_per_s = 8100;
  p.mfu = 0.27;
  p.eta_s = 70;
  return p;
}

TEST(ProgressBar, MidRun) {
  // The text after the bar is 67 columns (the percentage is padded to 3 digits), so the bar
  // gets min(100 - 2 - 67, 30) = 30 cells, of
  // which 30 × 420 / 1000 = 12 (rounded down) are filled.
  const std::string text = "  42% step 420/1000 loss 2.310 | 8.1k tok/s | MFU 27% | ETA 0:01:10";
  ASSERT_EQ(text.size(), 67u);
  EXPECT_EQ(format_progress_bar(line_at(420, 1000)), "[" + std::string(12, '#') + std::string(18, '.') + "]" + text);
}

TEST(ProgressBar, LastStepIsFullAndHundredPercent) {
  const std::string bar = format_progress_bar(line_at(1000, 1000));
  EXPECT_EQ(bar.substr(0, 32), "[" + std::string(30, '#') + "]");
  EXPECT_EQ(bar.substr(32, 5), " 100%");
}

TEST(ProgressBar, NeverShowsHundredBeforeTheEnd) {
  EXPECT_EQ(format_progress_bar(line_at(999, 1000)).substr(32, 5), "  99%");
}

TEST(ProgressBar, SmallMfuKeepsADecimal) {
  ProgressLine p = line_at(1, 10);
  p.mfu = 0.0123;
  EXPECT_NE(format_progress_bar(p).find("| MFU 1.2% |"), std::string::npos);
}

TEST(ProgressBar, FitsTheColumns) {
  ProgressLine p = line_at(123456789, 987654321);
  p.loss = 12345.678;
  p.tokens_per_s = 4.2e9;
  p.eta_s = 1e7;
  for (int columns : {100, 80, 60}) {
    const std::string bar = format_progress_bar(p, columns);
    EXPECT_LE(bar.size(), size_t(columns)) << bar;
    // At least 10 cells, about 1/8 of them filled.
    const size_t cells = bar.find(']') - 1;
    EXPECT_GE(cells, 10u) << bar;
    EXPECT_EQ(bar.substr(0, 3), "[#.") << bar;
  }
  // 80 - 2 - 67 = 11 cells: 2 brackets + 11 + 67 = 80; 11 × 420 / 1000 = 4.62 → 4 filled.
  EXPECT_EQ(format_progress_bar(line_at(420, 1000), 80), "[####.......]  42% step 420/1000 loss 2.310 | 8.1k tok/s | MFU 27% | ETA 0:01:10");
}

TEST(FormatCount, SignificantFigures) {
  EXPECT_EQ(format_count(0), "0");
  EXPECT_EQ(format_count(950), "950");
  EXPECT_EQ(format_count(999.4), "999");
  EXPECT_EQ(format_count(999.6), "1.0k");
  EXPECT_EQ(format_count(8149), "8.1k");
  EXPECT_EQ(format_count(12345), "12k");
  EXPECT_EQ(format_count(2.5e6), "2.5M");
  EXPECT_EQ(format_count(3.26e9), "3.3G");
}

}  // namespace
}  // namespace keel
