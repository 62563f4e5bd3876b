// The nccl plugin's entry: its config section, joining the world on the backend's device, and
// the comm table, whose other slots (guards, NULL checks, one thread at a time) are
// keel_support::CommSlots.
#include <keel/comm.h>
#include <keel/plugin.h>
#include <keel_support/comm/comm_slots.hpp>
#include <keel_support/common/abi_guard.hpp>
#include <keel_support/common/plugin_entry.hpp>

#include "nccl_communicator.hpp"
#include "nccl_config.hpp"

namespace keel_nccl {
namespace {

using keel_support::StatusError;
using Slots = keel_support::CommSlots<Communicator>;

keel_status validate_config(const keel_host* host, const char* config_json, const char* json_path) {
  return keel_support::guard(host, Communicator::kSource, [&] { parse_nccl_comm_config(config_json, json_path); });
}

keel_status create_world(const keel_host* host, const char* config_json, const char* json_path, void** /*out_comm*/) {
  return keel_support::guard(host, Communicator::kSource, [&] {
    parse_nccl_comm_config(config_json, json_path);  // a bad section is still reported as such
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the nccl comm needs the backend (create_world_on, ABI 0.8)");
  });
}

keel_status create_world_on(const keel_host* host, const char* config_json, const char* json_path,
                            const keel_backend_api* backend, void* backend_obj, void** out_comm) {
  return keel_support::guard(host, Communicator::kSource, [&] {
    Slots::require_out(out_comm, "create_world_on: out_comm");
    const NcclCommConfig config = parse_nccl_comm_config(config_json, json_path);
    *out_comm = Communicator::create_world_on(host, config, backend, backend_obj).release();
  });
}

const keel_comm_api kApi = Slots::table(validate_config, create_world, create_world_on);

const keel_plugin_info kInfos[] = {keel_support::plugin_info(
    KEEL_KIND_COMM, "nccl", "0.1.0", &kApi,
    "NCCL collectives and point-to-point on the CUDA backend's memory, queued on its stream; one rank per GPU "
    "(verified on one NVIDIA H200, driver 580.159.04, in a world of one; not yet across GPUs)")};

const keel_plugin_list kList = keel_support::plugin_list(kInfos);

}  // namespace
}  // namespace keel_nccl

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &keel_nccl::kList; }
