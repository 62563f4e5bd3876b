// The offload tier's rates on the progress line and the bar: shown when the run has a tier
// (rates >= 0), absent otherwise, and the bar still never grows past its columns.
#include <gtest/gtest.h>

#include "metrics/progress.h"

namespace {

keel::ProgressLine line_with_tier(double read_GBps, double write_GBps) {
  keel::ProgressLine p;
  p.step = 20;
  p.total_steps = 100;
  p.loss = 2.5;
  p.tokens_per_s = 8100;
  p.mfu = 0.27;
  p.offload_read_GBps = read_GBps;
  p.offload_write_GBps = write_GBps;
  return p;
}

TEST(OffloadProgress, LineShowsTheTiersRatesBeforeTheValidationLoss) {
  keel::ProgressLine p = line_with_tier(1.234, 0.5);
  p.val_loss = 2.75;
  const std::string line = keel::format_progress(p);
  EXPECT_NE(line.find("| ETA 0:00:00 | offload r 1.23 w 0.50 GB/s | val_loss 2.7500"), std::string::npos) << line;
}

TEST(OffloadProgress, WithoutATierNothingIsShown) {
  const keel::ProgressLine p = line_with_tier(-1, -1);
  EXPECT_EQ(keel::format_progress(p).find("offload"), std::string::npos);
  EXPECT_EQ(keel::format_progress_bar(p).find("tier"), std::string::npos);
}

TEST(OffloadProgress, BarShowsTheRatesWithinItsColumns) {
  const keel::ProgressLine p = line_with_tier(2.04, 1.96);
  const std::string bar = keel::format_progress_bar(p, 120);
  EXPECT_NE(bar.find("| ETA 0:00:00 | tier r/w 2.0/2.0 GB/s"), std::string::npos) << bar;
  for (int columns : {40, 80, 120}) EXPECT_LE(keel::format_progress_bar(p, columns).size(), size_t(columns));
}

}  // namespace
