// The metrics file across a resume: the records of steps past the checkpoint (logged by a run
// that went on and stopped before its next save) are dropped before the resumed run appends, so
// each step appears once; a fresh run starts the file anew; lines that are not step records stay.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "metrics/metrics_log.h"

namespace keel {
namespace {

namespace fs = std::filesystem;

struct TempFile {
  fs::path path;
  TempFile() {
    path = fs::temp_directory_path() /
           ("keel_metrics_log_test_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) +
            ".jsonl");
    fs::remove(path);
  }
  ~TempFile() {
    fs::remove(path);
    fs::remove(path.string() + ".resuming");
  }
};

std::vector<std::string> lines_of(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Steps 1..6 logged, with an evaluation at 4 and a line that is not a record.
void write_six_steps(const fs::path& path) {
  MetricsLog log(path.string(), /*append=*/false);
  for (int64_t step = 1; step <= 6; ++step) {
    nlohmann::json record = {{"step", step}, {"loss", 5.0 - step}};
    if (step == 4) record["val_loss"] = 1.5;
    log.write(record);
  }
  std::ofstream(path, std::ios::app) << "not json\n";
}

TEST(MetricsLog, AResumeDropsTheStepsPastItsCheckpointThenAppends) {
  TempFile file;
  write_six_steps(file.path);
  {
    MetricsLog resumed(file.path.string(), /*append=*/true, /*resumed_step=*/3);
    resumed.write({{"step", 4}, {"loss", 0.25}});
  }
  const auto lines = lines_of(file.path);
  ASSERT_EQ(lines.size(), 5u);
  std::vector<int64_t> steps;
  for (const auto& line : lines) {
    const auto record = nlohmann::json::parse(line, nullptr, false);
    steps.push_back(record.is_object() ? record["step"].get<int64_t>() : -1);
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, -1, 4}));
  EXPECT_EQ(nlohmann::json::parse(lines.back())["loss"], 0.25);  // the resumed run's step 4, once
  EXPECT_FALSE(fs::exists(file.path.string() + ".resuming"));
}

TEST(MetricsLog, AResumeAtTheLastLoggedStepKeepsEverything) {
  TempFile file;
  write_six_steps(file.path);
  const auto before = lines_of(file.path);
  { MetricsLog resumed(file.path.string(), /*append=*/true, /*resumed_step=*/6); }
  EXPECT_EQ(lines_of(file.path), before);
}

TEST(MetricsLog, AFreshRunStartsTheFileAnew) {
  TempFile file;
  write_six_steps(file.path);
  {
    MetricsLog fresh(file.path.string(), /*append=*/false);
    fresh.write({{"step", 1}, {"loss", 9.0}});
  }
  ASSERT_EQ(lines_of(file.path).size(), 1u);
}

TEST(MetricsLog, AResumeWithNoFileYetCreatesIt) {
  TempFile file;
  {
    MetricsLog resumed(file.path.string(), /*append=*/true, /*resumed_step=*/10);
    resumed.write({{"step", 11}});
  }
  ASSERT_EQ(lines_of(file.path).size(), 1u);
}

}  // namespace
}  // namespace keel
