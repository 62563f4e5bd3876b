// The offload plugins' C ABI face (abi/keel/offload.h): "nvme" and "cpu", one keel_offload_api
// each over the engines of this folder. Both tables share every slot but validate_config and
// create, which parse their own keys and build their own engine; the facts of the machine (the
// folder's checks and free space, the host's memory) are looked at in create, at start-up.
#include <keel/offload.h>
#include <keel/plugin.h>
#include <keel_support/abi_guard.hpp>
#include <keel_support/sized_output.hpp>

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>

#include "cpu_engine.hpp"
#include "nvme_engine.hpp"
#include "offload_section.hpp"
#include "offload_tier.hpp"
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

void check_create_args(const keel_host* host, const keel_offload_create_args* args, void** out_engine) {
  if (!host || !args || !out_engine)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: host, args or out_engine is NULL");
  if (args->struct_size < sizeof(keel_offload_create_args))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: args->struct_size is " + std::to_string(args->struct_size) +
                                                     ", below the " + std::to_string(sizeof(keel_offload_create_args)) +
                                                     " bytes of keel_offload_create_args");
  if (args->world_rank < 0)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: world_rank is " + std::to_string(args->world_rank) +
                                                     "; expected >= 0");
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

void hand_out(const keel_host* host, const char* source, std::unique_ptr<OffloadEngine> engine,
              const keel_offload_create_args* args, const std::string& capacity_key, void** out_engine) {
  if (args->device_backend)
    keel_logf(host, KEEL_LOG_DEBUG, source, "alloc_buffer gives unpinned host memory (no device pinning yet)");
  *out_engine = new OffloadTier(host, source, std::move(engine), capacity_key);
}

// --- nvme ---

keel_status nvme_validate_config(const keel_host* host, const char* config_json, const char* json_path) {
  return guard(host, kNvmeSource, [&] { parse_nvme_section(config_json, json_path ? json_path : "offload"); });
}

keel_status nvme_create(const keel_host* host, const keel_offload_create_args* args, void** out_engine) {
  return guard(host, kNvmeSource, [&] {
    check_create_args(host, args, out_engine);
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
    check_create_args(host, args, out_engine);
    const std::string json_path = json_path_of(args);
    CpuEngineConfig config = parse_cpu_section(args->config_json, json_path);
    const bool capacity_given = config.capacity_bytes != 0;
    if (!capacity_given) config.capacity_bytes = physical_memory_bytes(config.alignment_bytes);
    const std::string capacity_key =
        json_path + ".capacity_bytes" + (capacity_given ? "" : " (not set: the machine's physical memory)");
    hand_out(host, kCpuSource, std::make_unique<CpuEngine>(config), args, capacity_key, out_engine);
  });
}

// --- the slots both share ---

// Runs body(tier) under guard; without a tier there is no host to carry a message.
template <typename Body>
keel_status with(void* handle, Body&& body) noexcept {
  auto* tier = static_cast<OffloadTier*>(handle);
  if (!tier) return KEEL_ERR_INVALID_ARGUMENT;
  return guard(tier->host(), tier->source(), [&] { body(*tier); });
}

std::string name_of(const char* name) {
  if (!name) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "the extent name is NULL");
  return name;
}

void destroy(void* handle) { delete static_cast<OffloadTier*>(handle); }

keel_status describe(void* handle, keel_offload_info* out) {
  return with(handle, [&](OffloadTier& tier) {
    keel_support::write_sized_output(out, tier.info(), sizeof(keel_offload_info), "describe: out");
  });
}

keel_status add_extent(void* handle, const char* name, uint64_t bytes) {
  return with(handle, [&](OffloadTier& tier) { tier.add_extent(name_of(name), bytes); });
}

keel_status submit_write(void* handle, const char* name, uint64_t offset, const void* src, uint64_t bytes,
                         uint64_t* out_ticket) {
  return with(handle, [&](OffloadTier& tier) {
    if (!out_ticket) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "submit_write: out_ticket is NULL");
    *out_ticket = tier.engine().submit_write(name_of(name), offset, src, bytes);
  });
}

keel_status submit_read(void* handle, const char* name, uint64_t offset, void* dst, uint64_t bytes,
                        uint64_t* out_ticket) {
  return with(handle, [&](OffloadTier& tier) {
    if (!out_ticket) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "submit_read: out_ticket is NULL");
    *out_ticket = tier.engine().submit_read(name_of(name), offset, dst, bytes);
  });
}

keel_status wait(void* handle, uint64_t ticket) {
  return with(handle, [&](OffloadTier& tier) { tier.engine().wait(ticket); });
}

keel_status wait_all(void* handle) {
  return with(handle, [&](OffloadTier& tier) { tier.engine().wait_all(); });
}

keel_status counters(void* handle, keel_offload_counters* out) {
  return with(handle, [&](OffloadTier& tier) {
    keel_support::write_sized_output(out, tier.counters(), sizeof(keel_offload_counters), "counters: out");
  });
}

keel_status alloc_buffer(void* handle, uint64_t bytes, void** out_buffer) {
  return with(handle, [&](OffloadTier& tier) {
    if (!out_buffer) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "alloc_buffer: out_buffer is NULL");
    *out_buffer = tier.alloc_buffer(bytes);
  });
}

void free_buffer(void* handle, void* buffer) {
  auto* tier = static_cast<OffloadTier*>(handle);
  if (!tier) return;
  try {
    tier->free_buffer(buffer);
  } catch (const std::exception& e) {
    keel_logf(tier->host(), KEEL_LOG_ERROR, tier->source(), "%s", e.what());
  }
}

constexpr keel_offload_api table(decltype(keel_offload_api::validate_config) validate,
                                 decltype(keel_offload_api::create) create) {
  return keel_offload_api{sizeof(keel_offload_api), validate, create, destroy, describe, add_extent, submit_write,
                          submit_read, wait, wait_all, counters, alloc_buffer, free_buffer};
}

const keel_offload_api kNvmeApi = table(nvme_validate_config, nvme_create);
const keel_offload_api kCpuApi = table(cpu_validate_config, cpu_create);

const keel_plugin_info kInfos[] = {
    {sizeof(keel_plugin_info), KEEL_KIND_OFFLOAD, "nvme", "0.1.0", KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR,
     &kNvmeApi, "Offload tier in O_DIRECT files on a disk (one per extent, io_uring, queue_depth in flight)"},
    {sizeof(keel_plugin_info), KEEL_KIND_OFFLOAD, "cpu", "0.1.0", KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR,
     &kCpuApi, "Offload tier in host memory (one aligned allocation per extent, copies on a worker thread)"},
};

const keel_plugin_list kList = {sizeof(keel_plugin_list), KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR,
                                sizeof kInfos / sizeof kInfos[0], kInfos};

}  // namespace
}  // namespace keel_offload

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &keel_offload::kList; }
