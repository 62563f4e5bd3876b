// The "files" offload plugin's C table: its "offload" keys (path, capacity_bytes), parsed alike by
// validate_config and create, and the entry symbol. keel_support::OffloadSlots writes every
// other slot of the table; SyncOffloadEngine runs the store on two worker threads.
#include <keel/offload.h>
#include <keel/plugin.h>
#include <keel_support/common/json_section.hpp>
#include <keel_support/offload/offload_engine_base.hpp>
#include <keel_support/offload/offload_slots.hpp>
#include <keel_support/common/plugin_entry.hpp>

#include <memory>
#include <string>

#include "files_store.hpp"

namespace keel_files {
namespace {

constexpr const char* kSource = "offload files";

struct FilesConfig {
  std::string path;             // the folder the engine makes its own folder in
  uint64_t capacity_bytes = 0;  // the most bytes all extents together may hold
};

// The core passes the section less its own keys (plugin, optimizer_state, params, gradients).
FilesConfig parse_config(const char* config_json, const char* json_path) {
  auto section = keel_support::JsonSection::parse(config_json, json_path && *json_path ? json_path : "offload");
  FilesConfig config;
  config.path = section.require<std::string>("path");
  config.capacity_bytes = section.get_in_range<uint64_t>("capacity_bytes", uint64_t(1) << 30, 4096, uint64_t(1) << 50);
  section.finish();
  return config;
}

keel_status validate_config(const keel_host* host, const char* config_json, const char* json_path) {
  return keel_support::guard(host, kSource, [&] { parse_config(config_json, json_path); });
}

keel_status create(const keel_host* host, const keel_offload_create_args* args, void** out_engine) {
  return keel_support::guard(host, kSource, [&] {
    keel_support::check_offload_create_args(host, args, out_engine);
    const FilesConfig config = parse_config(args->config_json, args->json_path);
    keel_support::SyncEngineShape shape;
    shape.kind = "files";
    shape.alignment_bytes = 4096;            // a page: what the page cache copies fastest
    shape.ideal_request_bytes = 1u << 20;    // a MiB keeps the syscall overhead small
    shape.capacity_bytes = config.capacity_bytes / 4096 * 4096;
    shape.worker_threads = 2;                // two requests in flight overlap their copies
    auto engine = std::make_unique<keel_support::SyncOffloadEngine>(shape, std::make_unique<FileExtents>(config.path));
    *out_engine = new keel_support::OffloadEngineHandle(host, kSource, std::move(engine), "offload.capacity_bytes");
  });
}

constexpr keel_offload_api kApi = keel_support::OffloadSlots::table(validate_config, create);

const keel_plugin_info kInfos[] = {keel_support::plugin_info(
    KEEL_KIND_OFFLOAD, "files", "0.1.0", &kApi,
    "Example offload tier: one ordinary file per extent, through the page cache")};

const keel_plugin_list kList = keel_support::plugin_list(kInfos);

}  // namespace
}  // namespace keel_files

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &keel_files::kList; }
