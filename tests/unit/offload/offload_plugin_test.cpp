// libkeel-offload.so through its C ABI tables, loaded with dlopen as the core loads it: the
// entry lists "nvme" and "cpu"; a write and a read back through add_extent/submit/wait give the
// same bytes on both; validate_config and create refuse with the JSON path (offload.<key>);
// add_extent past the capacity names both numbers and offload.capacity_bytes; the nvme tier's
// files carry the rank in their folder's name and are gone after destroy.
#include <gtest/gtest.h>
#include <keel/offload.h>
#include <keel/plugin.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "offload_test_support.hpp"
#include "plugin_test_support.hpp"

namespace offload_test {
namespace {

using keel_test::last_error;
using keel_test::LoadedPlugin;

// One plugin of the library, with a host recording errors, and a tier made from a config.
class OffloadPlugin {
 public:
  explicit OffloadPlugin(const char* name) : plugin_(KEEL_OFFLOAD_PLUGIN_PATH, KEEL_KIND_OFFLOAD, name) {}
  ~OffloadPlugin() { destroy(); }
  const keel_offload_api& api() const { return plugin_.api<keel_offload_api>(); }
  const keel_host* host() const { return &host_; }

  keel_status validate(const std::string& config) const {
    last_error().clear();
    return api().validate_config(&host_, config.c_str(), "offload");
  }
  keel_status create(const std::string& config, int32_t world_rank = 0) {
    last_error().clear();
    const keel_offload_create_args args{sizeof(keel_offload_create_args), config.c_str(), "offload", world_rank, 0};
    return api().create(&host_, &args, &tier_);
  }
  void* tier() const { return tier_; }
  void destroy() {
    if (tier_) api().destroy(tier_);
    tier_ = nullptr;
  }

 private:
  LoadedPlugin plugin_;
  keel_host host_ = keel_test::make_test_host();
  void* tier_ = nullptr;
};

std::string nvme_config(const std::string& folder, const std::string& more = "") {
  return R"({"path": ")" + folder + "\"" + more + "}";
}

TEST(OffloadPlugin, EntryListsNvmeAndCpuAsOffloadPlugins) {
  LoadedPlugin plugin(KEEL_OFFLOAD_PLUGIN_PATH, KEEL_KIND_OFFLOAD, "nvme");
  const keel_plugin_list& list = plugin.list();
  ASSERT_EQ(list.count, 2u);
  EXPECT_STREQ(list.plugins[0].name, "nvme");
  EXPECT_STREQ(list.plugins[1].name, "cpu");
  for (size_t i = 0; i < list.count; ++i) {
    EXPECT_EQ(list.plugins[i].kind, KEEL_KIND_OFFLOAD);
    EXPECT_EQ(static_cast<const keel_offload_api*>(list.plugins[i].api)->struct_size, sizeof(keel_offload_api));
  }
}

// Writes two aligned blocks of random bytes into an extent, reads them back into a fresh buffer,
// and checks the bytes, the description and the counters.
void round_trip(OffloadPlugin& plugin) {
  const keel_offload_api& api = plugin.api();
  keel_offload_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(api.describe(plugin.tier(), &info), KEEL_OK) << last_error();
  ASSERT_GT(info.alignment_bytes, 0u);
  ASSERT_GT(info.capacity_bytes, 0u);
  const uint64_t bytes = 2 * std::max<uint64_t>(info.alignment_bytes, 4096);
  ASSERT_EQ(api.add_extent(plugin.tier(), "layer0.m", 2 * bytes), KEEL_OK) << last_error();

  void* source = nullptr;
  void* back = nullptr;
  ASSERT_EQ(api.alloc_buffer(plugin.tier(), bytes, &source), KEEL_OK) << last_error();
  ASSERT_EQ(api.alloc_buffer(plugin.tier(), bytes, &back), KEEL_OK) << last_error();
  ASSERT_EQ(reinterpret_cast<uintptr_t>(source) % info.alignment_bytes, 0u);
  const keel_support::AlignedBuffer random = random_bytes(bytes, 7);
  std::memcpy(source, random.data(), bytes);

  uint64_t write = 0, read = 0;
  ASSERT_EQ(api.submit_write(plugin.tier(), "layer0.m", bytes, source, bytes, &write), KEEL_OK) << last_error();
  ASSERT_EQ(api.wait(plugin.tier(), write), KEEL_OK) << last_error();
  ASSERT_EQ(api.submit_read(plugin.tier(), "layer0.m", bytes, back, bytes, &read), KEEL_OK) << last_error();
  ASSERT_EQ(api.wait_all(plugin.tier()), KEEL_OK) << last_error();
  EXPECT_EQ(std::memcmp(back, random.data(), bytes), 0);

  // The first half was never written: it reads back as zeros.
  ASSERT_EQ(api.submit_read(plugin.tier(), "layer0.m", 0, back, bytes, &read), KEEL_OK) << last_error();
  ASSERT_EQ(api.wait(plugin.tier(), read), KEEL_OK) << last_error();
  EXPECT_EQ(std::vector<char>(static_cast<char*>(back), static_cast<char*>(back) + bytes),
            std::vector<char>(bytes, 0));

  keel_offload_counters counters{};
  counters.struct_size = sizeof counters;
  ASSERT_EQ(api.counters(plugin.tier(), &counters), KEEL_OK) << last_error();
  EXPECT_EQ(counters.bytes_written, bytes);
  EXPECT_EQ(counters.bytes_read, 2 * bytes);
  EXPECT_EQ(counters.requests_completed, 3u);
  api.free_buffer(plugin.tier(), source);
  api.free_buffer(plugin.tier(), back);
}

TEST(OffloadPlugin, CpuRoundTripThroughTheTable) {
  OffloadPlugin plugin("cpu");
  ASSERT_EQ(plugin.create(R"({"capacity_bytes": 1048576})"), KEEL_OK) << last_error();
  round_trip(plugin);
}

TEST(OffloadPlugin, NvmeRoundTripThroughTheTable) {
  ScratchFolder scratch;
  require_direct_io(scratch.path());
  OffloadPlugin plugin("nvme");
  ASSERT_EQ(plugin.create(nvme_config(scratch.path(), R"(, "queue_depth": 4, "block_bytes": 4096)")), KEEL_OK)
      << last_error();
  round_trip(plugin);
}

// Each refusal: the status, and the message's start naming the JSON path and what was expected.
struct Refusal {
  const char* plugin;
  std::string config;
  std::string message;
};

TEST(OffloadPlugin, ValidateConfigRefusesWithTheJsonPath) {
  const std::vector<Refusal> refusals = {
      {"nvme", "{}", "offload nvme: offload.path: required key is missing"},
      {"nvme", R"({"path": ""})", "offload nvme: offload.path: expected the path of a folder"},
      {"nvme", R"({"path": 3})", "offload nvme: offload.path: expected a string, found an integer 3"},
      {"nvme", R"({"path": "/x", "queue_depth": 0})",
       "offload nvme: offload.queue_depth: expected a value in [1, 4096], found 0"},
      {"nvme", R"({"path": "/x", "block_bytes": 6000})",
       "offload nvme: offload.block_bytes: expected a multiple of 4096 (the O_DIRECT alignment), found 6000"},
      {"nvme", R"({"path": "/x", "block_bytes": 2147483648})",
       "offload nvme: offload.block_bytes: expected a value in [4096, 1073741824], found 2147483648"},
      {"nvme", R"({"path": "/x", "capacity_bytes": 100})",
       "offload nvme: offload.capacity_bytes: expected a value in [4096, 1152921504606846976], found 100"},
      {"nvme", R"({"path": "/x", "queue_dept": 8})",
       "offload nvme: offload.queue_dept: unknown key (did you mean \"queue_depth\"?)"},
      {"cpu", R"({"path": "/x"})", "offload cpu: offload.path: unknown key"},
      {"cpu", R"({"alignment_bytes": 48})", "offload cpu: offload.alignment_bytes: expected a power of two, found 48"},
      {"cpu", R"({"capacity_bytes": -1})",
       "offload cpu: offload.capacity_bytes: expected a value in [64, 1152921504606846976], found -1"},
      {"cpu", "[]", "offload cpu: offload: expected an object, found an array"},
  };
  for (const Refusal& refusal : refusals) {
    SCOPED_TRACE(std::string(refusal.plugin) + " " + refusal.config);
    OffloadPlugin plugin(refusal.plugin);
    EXPECT_EQ(plugin.validate(refusal.config), KEEL_ERR_INVALID_CONFIG);
    EXPECT_EQ(last_error().rfind(refusal.message, 0), 0u) << last_error();
    // create parses the same way, so it refuses the same way and makes nothing.
    EXPECT_EQ(plugin.create(refusal.config), KEEL_ERR_INVALID_CONFIG);
    EXPECT_EQ(last_error().rfind(refusal.message, 0), 0u) << last_error();
    EXPECT_EQ(plugin.tier(), nullptr);
  }
}

TEST(OffloadPlugin, ValidateConfigAcceptsEveryKeyInRange) {
  OffloadPlugin nvme("nvme");
  EXPECT_EQ(nvme.validate(R"({"path": "/x", "capacity_bytes": 8192, "queue_depth": 4096, "block_bytes": 4096})"),
            KEEL_OK)
      << last_error();
  OffloadPlugin cpu("cpu");
  EXPECT_EQ(cpu.validate(R"({"capacity_bytes": 4096, "alignment_bytes": 4096})"), KEEL_OK) << last_error();
  EXPECT_EQ(cpu.validate("{}"), KEEL_OK) << last_error();
}

// The folder's problems are found at create (start-up), named by offload.path.
TEST(OffloadPlugin, NvmeCreateNamesOffloadPathForABadFolder) {
  ScratchFolder scratch;
  const std::string file = scratch.path() + "/a-file";
  std::ofstream(file) << "not a folder";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {scratch.path() + "/missing", "does not exist"},
      {file, "is not a directory"},
  };
  for (const auto& [folder, problem] : cases) {
    SCOPED_TRACE(folder);
    OffloadPlugin plugin("nvme");
    EXPECT_NE(plugin.create(nvme_config(folder)), KEEL_OK);
    EXPECT_EQ(last_error().rfind("offload nvme: offload.path: offload folder \"" + folder + "\" " + problem, 0), 0u)
        << last_error();
    EXPECT_EQ(plugin.tier(), nullptr);
  }
}

TEST(OffloadPlugin, NvmeCreateRefusesACapacityPastTheFreeSpace) {
  ScratchFolder scratch;
  require_direct_io(scratch.path());
  OffloadPlugin plugin("nvme");
  EXPECT_EQ(plugin.create(nvme_config(scratch.path(), R"(, "capacity_bytes": 1152921504606846976)")), KEEL_ERR_IO);
  EXPECT_EQ(last_error().rfind("offload nvme: offload.path (with offload.capacity_bytes 1152921504606846976): offload "
                               "folder \"" + scratch.path() + "\" has ",
                               0),
            0u)
      << last_error();
  EXPECT_NE(last_error().find("but the engine reserves 1152921504606846976 bytes"), std::string::npos) << last_error();
}

TEST(OffloadPlugin, AddExtentPastTheCapacityNamesTheNumbersAndTheKey) {
  for (const char* kind : {"cpu", "nvme"}) {
    SCOPED_TRACE(kind);
    ScratchFolder scratch;
    OffloadPlugin plugin(kind);
    const std::string config = std::string(kind) == "cpu" ? R"({"capacity_bytes": 12288})"
                                                          : nvme_config(scratch.path(), R"(, "capacity_bytes": 12288)");
    ASSERT_EQ(plugin.create(config), KEEL_OK) << last_error();
    ASSERT_EQ(plugin.api().add_extent(plugin.tier(), "a", 8192), KEEL_OK) << last_error();
    EXPECT_EQ(plugin.api().add_extent(plugin.tier(), "b", 8192), KEEL_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(last_error(), std::string("offload ") + kind + ": offload.capacity_bytes: " + kind +
                                " engine: add_extent \"b\" of 8192 bytes: the engine already holds 8192 bytes in 1 "
                                "extents, and this one would exceed its capacity_bytes 12288; raise capacity_bytes or "
                                "offload less");
  }
}

TEST(OffloadPlugin, NvmeFilesCarryTheRankAndAreRemovedAtDestroy) {
  ScratchFolder scratch;
  require_direct_io(scratch.path());
  OffloadPlugin plugin("nvme");
  ASSERT_EQ(plugin.create(nvme_config(scratch.path()), 3), KEEL_OK) << last_error();
  ASSERT_EQ(plugin.api().add_extent(plugin.tier(), "w", 8192), KEEL_OK) << last_error();
  std::vector<std::string> entries;
  for (const auto& entry : std::filesystem::directory_iterator(scratch.path()))
    entries.push_back(entry.path().filename().string());
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].rfind("keel-offload-rank3-" + std::to_string(getpid()) + "-", 0), 0u) << entries[0];
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(scratch.path() + "/" + entries[0]),
                          std::filesystem::directory_iterator()),
            2);  // the extent's file and the owner file
  EXPECT_TRUE(std::filesystem::is_regular_file(scratch.path() + "/" + entries[0] + "/.keel-owner"));
  plugin.destroy();
  EXPECT_TRUE(std::filesystem::is_empty(scratch.path()));
}

// Two ranks of one process (as if on two hosts whose pids coincide) share a folder: their
// folders' names differ and each removes only its own.
TEST(OffloadPlugin, NvmeRanksSharingAFolderKeepApart) {
  ScratchFolder scratch;
  require_direct_io(scratch.path());
  OffloadPlugin rank0("nvme"), rank1("nvme");
  ASSERT_EQ(rank0.create(nvme_config(scratch.path()), 0), KEEL_OK) << last_error();
  ASSERT_EQ(rank1.create(nvme_config(scratch.path()), 1), KEEL_OK) << last_error();
  ASSERT_EQ(rank0.api().add_extent(rank0.tier(), "w", 4096), KEEL_OK) << last_error();
  ASSERT_EQ(rank1.api().add_extent(rank1.tier(), "w", 4096), KEEL_OK) << last_error();
  rank0.destroy();
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(scratch.path()))
    left.push_back(entry.path().filename().string());
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].rfind("keel-offload-rank1-", 0), 0u) << left[0];
}

TEST(OffloadPlugin, AllocBufferRefusesASizeOffTheAlignment) {
  OffloadPlugin plugin("cpu");
  ASSERT_EQ(plugin.create(R"({"capacity_bytes": 65536, "alignment_bytes": 4096})"), KEEL_OK) << last_error();
  void* buffer = nullptr;
  EXPECT_EQ(plugin.api().alloc_buffer(plugin.tier(), 100, &buffer), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "offload cpu: alloc_buffer: 100 bytes; expected a positive multiple of the tier's alignment 4096");
  EXPECT_EQ(buffer, nullptr);
}

}  // namespace
}  // namespace offload_test
