// The nvme engine's files: in a folder named for this process, one file per extent, and gone
// when the engine is, even with requests still in flight.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <set>

#include "nvme_engine.hpp"
#include "offload_test_support.hpp"

namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20;

std::set<std::string> names_in(const std::string& folder) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) names.insert(entry.path().filename().string());
  return names;
}

std::unique_ptr<keel_offload::NvmeEngine> engine_in(const std::string& folder) {
  keel_offload::NvmeEngineConfig config;
  config.folder = folder;
  config.capacity_bytes = 64 * kMiB;
  return std::make_unique<keel_offload::NvmeEngine>(config);
}

TEST(NvmeCleanup, FilesLiveInAFolderNamedForThisProcessAndGoWithTheEngine) {
  offload_test::ScratchFolder scratch;
  offload_test::require_direct_io(scratch.path());
  if (HasFatalFailure()) return;
  std::string files_folder;
  {
    auto engine = engine_in(scratch.path());
    engine->add_extent("layer.0/adam m", kMiB);
    engine->add_extent("layer.0/adam v", kMiB);
    files_folder = engine->files_folder();
    std::string expected_prefix = scratch.path() + "/keel-offload-" + std::to_string(getpid()) + "-";
    EXPECT_EQ(0u, files_folder.rfind(expected_prefix, 0)) << files_folder;
    EXPECT_EQ((std::set<std::string>{".keel-owner", "0-layer.0_adam_m.extent", "1-layer.0_adam_v.extent"}),
              names_in(files_folder));
    EXPECT_EQ(kMiB, std::filesystem::file_size(files_folder + "/0-layer.0_adam_m.extent"));
  }
  EXPECT_FALSE(std::filesystem::exists(files_folder)) << files_folder << " outlived its engine";
  EXPECT_TRUE(names_in(scratch.path()).empty());
}

TEST(NvmeCleanup, DestroyingWithRequestsInFlightFinishesThemFirst) {
  offload_test::ScratchFolder scratch;
  offload_test::require_direct_io(scratch.path());
  if (HasFatalFailure()) return;
  keel_support::AlignedBuffer source = offload_test::random_bytes(32 * kMiB, 3);
  keel_support::AlignedBuffer earlier = offload_test::random_bytes(16 * kMiB, 4);
  keel_support::AlignedBuffer landed(16 * kMiB, 4096);
  {
    auto engine = engine_in(scratch.path());
    engine->add_extent("in-flight", 32 * kMiB);
    engine->add_extent("written-before", 16 * kMiB);
    engine->wait(engine->submit_write("written-before", 0, earlier.data(), 16 * kMiB));
    engine->submit_write("in-flight", 0, source.data(), 32 * kMiB);
    engine->submit_read("written-before", 0, landed.data(), 16 * kMiB);
  }  // no wait: the destructor must finish both before it closes and removes the file
  // A destructor that dropped or cancelled the read would leave `landed` zero.
  EXPECT_EQ(0, std::memcmp(landed.data(), earlier.data(), 16 * kMiB)) << "the read in flight did not complete";
  EXPECT_TRUE(names_in(scratch.path()).empty());
}

TEST(NvmeCleanup, TwoEnginesInOneFolderKeepApart) {
  offload_test::ScratchFolder scratch;
  offload_test::require_direct_io(scratch.path());
  if (HasFatalFailure()) return;
  auto first = engine_in(scratch.path());
  auto second = engine_in(scratch.path());
  first->add_extent("same-name", kMiB);
  second->add_extent("same-name", kMiB);
  EXPECT_NE(first->files_folder(), second->files_folder());
  first.reset();
  EXPECT_EQ((std::set<std::string>{".keel-owner", "0-same-name.extent"}), names_in(second->files_folder()));
}

}  // namespace
