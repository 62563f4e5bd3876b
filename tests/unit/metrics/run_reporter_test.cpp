// The reporter end to end without a model: what reaches the screen in bar and line mode, the
// JSONL record's names, and that the TensorBoard file holds valid frames for every scalar.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "metrics/run_reporter.h"
#include "metrics/tensorboard_event.h"

namespace keel {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("keel_reporter_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                        "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

StepReport report(int64_t step, int64_t total) {
  StepReport r;
  r.step = step;
  r.total_steps = total;
  r.loss = 5.0 - step;
  r.lr = 1e-3;
  r.grad_norm = 0.5;
  r.tokens_per_s = 2048;
  r.mfu = 0.05;
  r.phase_ms = {{"data", 1.0}, {"forward", 2.0}};
  r.memory_bytes = 123456789;
  return r;
}

// Runs three steps (validation at the last) with a note after the first.
std::string run_three_steps(const ReporterOptions& options) {
  std::ostringstream out;
  RunReporter reporter(options, out);
  reporter.header("model gpt");
  reporter.step(report(1, 3));
  reporter.note("checkpoint saved");
  reporter.step(report(2, 3));
  StepReport last = report(3, 3);
  last.val_loss = 1.75;
  reporter.step(last);
  reporter.finish();
  return out.str();
}

TEST(RunReporter, BarRedrawsInPlaceAndKeepsNotesOnTheirOwnLines) {
  TempDir dir;
  ReporterOptions options;
  options.metrics_path = (dir.path / "m.jsonl").string();
  options.progress_bar = true;
  const std::string out = run_three_steps(options);
  EXPECT_EQ(out.rfind("model gpt\n", 0), 0u) << out;
  // Three bars, each drawn from the start of the line.
  size_t bars = 0;
  for (size_t at = out.find("\r["); at != std::string::npos; at = out.find("\r[", at + 1)) ++bars;
  EXPECT_EQ(bars, 3u) << out;
  // A note erases the bar (spaces), prints itself and a newline, then redraws the bar.
  const size_t note = out.find("checkpoint saved\n[");
  ASSERT_NE(note, std::string::npos) << out;
  EXPECT_EQ(out.substr(note - 2, 2), " \r");
  EXPECT_NE(out.find(" \rstep 3/3 | val_loss 1.7500\n\r["), std::string::npos) << out;
  // The last bar shows 100% and finish() ends its line.
  const size_t last_bar = out.rfind('[');
  EXPECT_NE(out.find("] 100% step 3/3 loss 2.000", last_bar), std::string::npos) << out;
  EXPECT_EQ(out.back(), '\n');
}

TEST(RunReporter, PlainLinesWithoutATerminal) {
  TempDir dir;
  ReporterOptions options;
  options.metrics_path = (dir.path / "m.jsonl").string();
  const std::string out = run_three_steps(options);
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
  for (const char* needle : {"tok/s", "MFU", "ETA", "val_loss 1.7500", "checkpoint saved\n"})
    EXPECT_NE(out.find(needle), std::string::npos) << needle << " missing from " << out;
}

TEST(RunReporter, MetricsRecordNames) {
  TempDir dir;
  ReporterOptions options;
  options.metrics_path = (dir.path / "m.jsonl").string();
  run_three_steps(options);
  std::ifstream in(options.metrics_path);
  std::string line;
  std::vector<nlohmann::json> records;
  while (std::getline(in, line)) records.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0]["step"], 1);
  EXPECT_EQ(records[0]["loss"], 4.0);
  EXPECT_EQ(records[0]["memory_bytes"], 123456789);
  EXPECT_EQ(records[0]["time_ms"]["forward"], 2.0);
  EXPECT_FALSE(records[0].contains("val_loss"));
  EXPECT_EQ(records[2]["val_loss"], 1.75);
}

// Splits a TFRecord file into its payloads, checking both checksums of every frame.
std::vector<std::string> read_frames(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> frames;
  for (size_t at = 0; at < file.size();) {
    EXPECT_LE(at + 12, file.size());
    uint64_t length;
    uint32_t length_crc, data_crc;
    std::memcpy(&length, file.data() + at, 8);
    std::memcpy(&length_crc, file.data() + at + 8, 4);
    EXPECT_EQ(length_crc, masked_crc32c(file.data() + at, 8));
    EXPECT_LE(at + 16 + length, file.size());
    frames.push_back(file.substr(at + 12, length));
    std::memcpy(&data_crc, file.data() + at + 12 + length, 4);
    EXPECT_EQ(data_crc, masked_crc32c(frames.back().data(), length));
    at += 16 + length;
  }
  return frames;
}

TEST(RunReporter, TensorBoardFileHoldsEveryScalar) {
  TempDir dir;
  ReporterOptions options;
  options.metrics_path = (dir.path / "m.jsonl").string();
  options.tensorboard_dir = (dir.path / "tb").string();
  std::ostringstream out;
  std::string path;
  {
    RunReporter reporter(options, out);
    path = reporter.tensorboard_path();
    reporter.step(report(1, 2));
    // Flushed after each step: readable before the run ends.
    EXPECT_EQ(read_frames(path).size(), 1u + 8u);  // version + 6 fixed scalars + 2 phases
    StepReport last = report(2, 2);
    last.val_loss = 1.75;
    reporter.step(last);
    reporter.finish();
  }
  EXPECT_EQ(fs::path(path).parent_path(), fs::path(options.tensorboard_dir));
  EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u) << path;
  const std::vector<std::string> frames = read_frames(path);
  ASSERT_EQ(frames.size(), 1u + 8u + 9u);
  EXPECT_NE(frames[0].find("brain.Event:2"), std::string::npos);
  // The first scalar is train/loss = 4 at step 1: everything after the 9-byte wall time.
  EXPECT_EQ(frames[1].substr(9), encode_scalar_event(0, 1, "train/loss", 4.0f).substr(9));
  const char* tags[] = {"train/loss", "train/lr", "train/grad_norm", "perf/tokens_per_s", "perf/mfu",
                        "memory/resident_bytes", "time/data_ms", "time/forward_ms", "val/loss"};
  for (size_t i = 0; i < 9; ++i) EXPECT_NE(frames[9 + i].find(tags[i]), std::string::npos) << tags[i];
}

TEST(RunReporter, TensorBoardHoldsTheModelsOwnMetrics) {
  TempDir dir;
  ReporterOptions options;
  options.metrics_path = (dir.path / "m.jsonl").string();
  options.tensorboard_dir = (dir.path / "tb").string();
  std::ostringstream out;
  std::string path;
  {
    RunReporter reporter(options, out);
    path = reporter.tensorboard_path();
    StepReport r = report(1, 2);
    r.extra["model"] = {{"aux_loss", 2.5}, {"expert_load.max_over_mean", 1.25}};
    reporter.step(r);
    reporter.finish();
  }
  const std::vector<std::string> frames = read_frames(path);
  ASSERT_EQ(frames.size(), 1u + 8u + 2u);  // version + the fixed scalars and phases + the model's two
  EXPECT_EQ(frames[9].substr(9), encode_scalar_event(0, 1, "model/aux_loss", 2.5f).substr(9));
  EXPECT_EQ(frames[10].substr(9), encode_scalar_event(0, 1, "model/expert_load.max_over_mean", 1.25f).substr(9));
  // And the JSONL record keeps them under "model".
  std::ifstream jsonl(options.metrics_path);
  std::string line;
  std::getline(jsonl, line);
  EXPECT_EQ(nlohmann::json::parse(line).at("model").at("aux_loss").get<double>(), 2.5);
}

TEST(RunReporter, UnwritableTensorBoardFolderNamesTheSetting) {
  TempDir dir;
  fs::create_directories(dir.path);
  std::ofstream(dir.path / "file") << "x";
  ReporterOptions options;
  options.metrics_path = (dir.path / "m.jsonl").string();
  options.tensorboard_dir = (dir.path / "file" / "tb").string();
  std::ostringstream out;
  try {
    RunReporter reporter(options, out);
    FAIL() << "a folder under a plain file was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("train.tensorboard_dir"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace keel
