// The bounds come from the engines' own checks (nvme_engine.cpp, cpu_engine.cpp), restated here
// in the config's words so the user sees offload.<key> rather than the engine's field name.
#include "offload_section.hpp"

#include <keel_support/common/json_section.hpp>

namespace keel_offload {

namespace {

using keel_support::ConfigError;
using keel_support::JsonSection;

constexpr uint64_t kMaxCapacityBytes = uint64_t(1) << 60;  // an exabyte: far past any disk, short of overflow
constexpr uint64_t kMaxBlockBytes = uint64_t(1) << 30;
constexpr uint32_t kMaxQueueDepth = 4096;
constexpr uint64_t kMaxCpuAlignmentBytes = uint64_t(1) << 21;  // a huge page

uint64_t capacity_of(JsonSection& section, uint64_t alignment_bytes) {
  const uint64_t capacity = section.get_in_range<uint64_t>("capacity_bytes", 0, alignment_bytes, kMaxCapacityBytes);
  return capacity;
}

}  // namespace

NvmeEngineConfig parse_nvme_section(const char* config_json, const std::string& json_path) {
  auto section = JsonSection::parse(config_json, json_path.c_str());
  NvmeEngineConfig config;
  config.folder = section.require<std::string>("path");
  if (config.folder.empty())
    throw ConfigError(section.path_of("path") + ": expected the path of a folder on a disk-backed filesystem, "
                      "found an empty string");
  config.capacity_bytes = capacity_of(section, NvmeEngine::kAlignmentBytes);
  config.queue_depth = section.get_in_range<uint32_t>("queue_depth", config.queue_depth, 1, kMaxQueueDepth);
  config.block_bytes =
      section.get_in_range<uint64_t>("block_bytes", config.block_bytes, NvmeEngine::kAlignmentBytes, kMaxBlockBytes);
  if (config.block_bytes % NvmeEngine::kAlignmentBytes != 0)
    throw ConfigError(section.path_of("block_bytes") + ": expected a multiple of " +
                      std::to_string(NvmeEngine::kAlignmentBytes) + " (the O_DIRECT alignment), found " +
                      std::to_string(config.block_bytes));
  section.finish();
  return config;
}

CpuEngineConfig parse_cpu_section(const char* config_json, const std::string& json_path) {
  auto section = JsonSection::parse(config_json, json_path.c_str());
  CpuEngineConfig config;
  config.alignment_bytes =
      section.get_in_range<uint64_t>("alignment_bytes", config.alignment_bytes, sizeof(void*), kMaxCpuAlignmentBytes);
  if ((config.alignment_bytes & (config.alignment_bytes - 1)) != 0)
    throw ConfigError(section.path_of("alignment_bytes") + ": expected a power of two, found " +
                      std::to_string(config.alignment_bytes));
  config.capacity_bytes = capacity_of(section, config.alignment_bytes);
  section.finish();
  return config;
}

}  // namespace keel_offload
