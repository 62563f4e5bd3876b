// The offload plugins' entry (keel/offload.h): "nvme" and "cpu", one keel_offload_api each
// over the engines of this folder. keel_support::OffloadSlots writes every slot but
// validate_config and create, which parse their own keys and build their own engine; the facts
// of the machine (the folder's checks and free space, the host's memory) are looked at in
// create, at start-up.
#include <keel/offload.h>
#include <keel/plugin.h>
#include <keel_support/common/abi_guard.hpp>
#include <keel_support/offload/offload_slots.hpp>
#include <keel_support/common/plugin_entry.hpp>

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>

#include "cpu_engine.hpp"
#include "nvme_engine.hpp"
#include "offload_section.hpp"
#include "path_checks.hpp"
#include "stale_folders.hpp"

namespace keel_offload {
namespace {

using keel_support::guard;
using keel_support::StatusError;

constexpr const char* kNvmeSource = "offload nvme";
constexpr const char* kCpuSource = "offload cpu";

std::string json_path_of(const keel_offload_create_args* args) {
  return args->json_path && *args->json_path ? args->json_path : "offload";
}

// The bytes free in `folder` as a multiple of `alignment`, at least one alignment so that a full
// disk is reported by the folder's own check ("has 0 bytes free") rather than as a zero capacity.
uint64_t free_bytes_in(const std::string& folder, uint64_t alignment) {
  struct statvfs info {};
  if (statvfs(folder.c_str(), &info) != 0) return alignment;  // the folder checks say why
  const uint64_t free_bytes = static_cast<uint64_t>(info.f_bavail) * info.f_frsize;
  return std::max(alignment, free_bytes / alignment * alignment);
}

uint64_t physical_memory_bytes(uint64_t alignment) {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_bytes = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_bytes <= 0) return alignment;
  const uint64_t bytes = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_bytes);
  return std::max(alignment, bytes / alignment * alignment);
}

void hand_out(const keel_host* host, const char* source, std::unique_ptr<keel_support::OffloadEngine> engine,
              const keel_offload_create_args* args, const std::string& capacity_key, void** out_engine) {
  if (args->device_backend)
    keel_logf(host, KEEL_LOG_DEBUG, source, "alloc_buffer gives unpinned host memory; keel_support strategies stage device copies "
              "through the backend's pinned alloc_host");
  *out_engine = new keel_support::OffloadEngineHandle(host, source, std::move(engine), capacity_key);
}

// --- nvme ---

keel_status nvme_validate_config(const keel_host* host, const char* config_json, const char* json_path) {
  return guard(host, kNvmeSource, [&] { parse_nvme_section(config_json, json_path ? json_path : "offload"); });
}

keel_status nvme_create(const keel_host* host, const keel_offload_create_args* args, void** out_engine) {
  return guard(host, kNvmeSource, [&] {
    keel_support::check_offload_create_args(host, args, out_engine);
    const std::string json_path = json_path_of(args);
    NvmeEngineConfig config = parse_nvme_section(args->config_json, json_path);
    config.owner = "rank" + std::to_string(args->world_rank);
    const bool capacity_given = config.capacity_bytes != 0;
    if (!capacity_given) {
      config.capacity_bytes = free_bytes_in(config.folder, NvmeEngine::kAlignmentBytes);
      config.check_free_space = false;  // a snapshot: other ranks may be reserving beside us
    }
    // The folder's checks run here first so their messages name the key the user must change.
    try {
      check_offload_folder(config.folder, config.check_free_space ? config.capacity_bytes : 0);
    } catch (const StatusError& e) {
      throw StatusError(e.code, json_path + (capacity_given ? ".path (with " + json_path + ".capacity_bytes " +
                                                                  std::to_string(config.capacity_bytes) + ")"
                                                            : ".path") +
                                    ": " + e.what());
    }
    // Folders of earlier processes of this host that died before their destroy ran.
    for (const std::string& line : remove_stale_folders(config.folder))
      keel_logf(host, KEEL_LOG_WARN, kNvmeSource, "%s", line.c_str());
    const std::string capacity_key = capacity_given ? json_path + ".capacity_bytes"
                                                    : json_path + ".capacity_bytes (not set: the free space in " +
                                                          json_path + ".path at start-up)";
    hand_out(host, kNvmeSource, std::make_unique<NvmeEngine>(config), args, capacity_key, out_engine);
  });
}

// --- cpu ---

keel_status cpu_validate_config(const keel_host* host, const char* config_json, const char* json_path) {
  return guard(host, kCpuSource, [&] { parse_cpu_section(config_json, json_path ? json_path : "offload"); });
}

keel_status cpu_create(const keel_host* host, const keel_offload_create_args* args, void** out_engine) {
  return guard(host, kCpuSource, [&] {
    keel_support::check_offload_create_args(host, args, out_engine);
    const std::string json_path = json_path_of(args);
    CpuEngineConfig config = parse_cpu_section(args->config_json, json_path);
    const bool capacity_given = config.capacity_bytes != 0;
    if (!capacity_given) config.capacity_bytes = physical_memory_bytes(config.alignment_bytes);
    const std::string capacity_key =
        json_path + ".capacity_bytes" + (capacity_given ? "" : " (not set: the machine's physical memory)");
    hand_out(host, kCpuSource, std::make_unique<CpuEngine>(config), args, capacity_key, out_engine);
  });
}

constexpr keel_offload_api kNvmeApi = keel_support::OffloadSlots::table(nvme_validate_config, nvme_create);
constexpr keel_offload_api kCpuApi = keel_support::OffloadSlots::table(cpu_validate_config, cpu_create);

const keel_plugin_info kInfos[] = {
    keel_support::plugin_info(KEEL_KIND_OFFLOAD, "nvme", "0.1.0", &kNvmeApi,
                              "Offload tier in O_DIRECT files on a disk (one per extent, io_uring, queue_depth in flight)"),
    keel_support::plugin_info(KEEL_KIND_OFFLOAD, "cpu", "0.1.0", &kCpuApi,
                              "Offload tier in host memory (one aligned allocation per extent, copies on a worker thread)"),
};

const keel_plugin_list kList = keel_support::plugin_list(kInfos);

}  // namespace
}  // namespace keel_offload

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &keel_offload::kList; }
