// The engine keys of the "offload" section, as the core hands them to the plugin (the section
// less the core's own keys: plugin, optimizer_state, params, gradients). Parsed the same way by
// validate_config (at start-up, before anything runs) and by create, so every refusal names its
// JSON path (offload.queue_depth) and the bounds. Facts about the machine (free disk space,
// physical memory) are not looked at here: they belong to create.
#pragma once

#include <cstdint>
#include <string>

#include "cpu_engine.hpp"
#include "nvme_engine.hpp"

namespace keel_offload {

// "nvme": path (required), capacity_bytes (0 when not given: create takes the folder's free
// space), queue_depth, block_bytes.
NvmeEngineConfig parse_nvme_section(const char* config_json, const std::string& json_path);

// "cpu": capacity_bytes (0 when not given: create takes the machine's physical memory),
// alignment_bytes.
CpuEngineConfig parse_cpu_section(const char* config_json, const std::string& json_path);

}  // namespace keel_offload
