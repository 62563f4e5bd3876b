// The mpi plugin's entry: its config section, joining the world, and the comm table, whose
// other slots (guards, NULL checks, one thread at a time) are keel_support::CommSlots.
#include <keel/comm.h>
#include <keel/plugin.h>
#include <keel_support/comm/comm_slots.hpp>
#include <keel_support/common/abi_guard.hpp>
#include <keel_support/common/plugin_entry.hpp>

#include "mpi_communicator.hpp"
#include "mpi_config.hpp"

namespace keel_mpi {
namespace {

using Slots = keel_support::CommSlots<Communicator>;

keel_status validate_config(const keel_host* host, const char* config_json, const char* json_path) {
  return keel_support::guard(host, Communicator::kSource, [&] { parse_mpi_comm_config(config_json, json_path); });
}

keel_status create_world(const keel_host* host, const char* config_json, const char* json_path, void** out_comm) {
  return keel_support::guard(host, Communicator::kSource, [&] {
    Slots::require_out(out_comm, "create_world: out_comm");
    *out_comm = Communicator::create_world(host, parse_mpi_comm_config(config_json, json_path)).release();
  });
}

// A host communicator: the backend changes nothing here (the core stages what it cannot reach).
keel_status create_world_on(const keel_host* host, const char* config_json, const char* json_path,
                            const keel_backend_api*, void*, void** out_comm) {
  return create_world(host, config_json, json_path, out_comm);
}

const keel_comm_api kApi = Slots::table(validate_config, create_world, create_world_on);

const keel_plugin_info kInfos[] = {keel_support::plugin_info(
    KEEL_KIND_COMM, "mpi", "0.1.0", &kApi,
    "MPI collectives and point-to-point on host memory; a world of one without a launcher")};

const keel_plugin_list kList = keel_support::plugin_list(kInfos);

}  // namespace
}  // namespace keel_mpi

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &keel_mpi::kList; }
