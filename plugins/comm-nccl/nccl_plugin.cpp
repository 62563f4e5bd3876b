// The nccl plugin's C ABI face: the comm table, its entry symbol, and NULL checks. Every slot
// runs under keel_support::guard so no exception crosses the ABI.
#include <keel/comm.h>
#include <keel/plugin.h>
#include <keel_support/abi_guard.hpp>
#include <keel_support/plugin_entry.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "nccl_communicator.hpp"
#include "nccl_config.hpp"

namespace keel_nccl {
namespace {

constexpr const char* kSource = "comm nccl";
using keel_support::StatusError;

Communicator* as_communicator(void* comm) { return static_cast<Communicator*>(comm); }

void require_out(const void* out, const char* what) {
  if (!out) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(what) + " is NULL");
}

// Runs an operation that talks to the other ranks, refused while another thread is in one.
template <typename Body>
keel_status exclusively(void* comm, const char* operation, Body&& body) {
  Communicator* communicator = as_communicator(comm);
  if (!communicator) return KEEL_ERR_INVALID_ARGUMENT;  // no host to carry a message
  return keel_support::guard(communicator->host(), kSource, [&] {
    Communicator::ExclusiveUse use(*communicator, operation);
    body(*communicator);
  });
}

// Runs `body` on a live communicator, with its host carrying any error message.
template <typename Body>
keel_status with_communicator(void* comm, Body&& body) {
  Communicator* communicator = as_communicator(comm);
  if (!communicator) return KEEL_ERR_INVALID_ARGUMENT;  // no host to carry a message
  return keel_support::guard(communicator->host(), kSource, [&] { body(*communicator); });
}

keel_status validate_config(const keel_host* host, const char* config_json, const char* json_path) {
  return keel_support::guard(host, kSource, [&] { parse_nccl_comm_config(config_json, json_path); });
}

keel_status create_world(const keel_host* host, const char* config_json, const char* json_path, void** /*out_comm*/) {
  return keel_support::guard(host, kSource, [&] {
    parse_nccl_comm_config(config_json, json_path);  // a bad section is still reported as such
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the nccl comm needs the backend (create_world_on, ABI 0.8)");
  });
}

keel_status create_world_on(const keel_host* host, const char* config_json, const char* json_path,
                            const keel_backend_api* backend, void* backend_obj, void** out_comm) {
  return keel_support::guard(host, kSource, [&] {
    require_out(out_comm, "create_world_on: out_comm");
    const NcclCommConfig config = parse_nccl_comm_config(config_json, json_path);
    *out_comm = Communicator::create_world_on(host, config, backend, backend_obj).release();
  });
}

void destroy(void* comm) { delete as_communicator(comm); }

keel_status rank(void* comm, int32_t* out_rank) {
  return with_communicator(comm, [&](Communicator& c) {
    require_out(out_rank, "rank: out_rank");
    *out_rank = c.rank();
  });
}

keel_status size(void* comm, int32_t* out_size) {
  return with_communicator(comm, [&](Communicator& c) {
    require_out(out_size, "size: out_size");
    *out_size = c.size();
  });
}

keel_status split(void* comm, int32_t color, int32_t key, void** out_comm) {
  return exclusively(comm, "split", [&](Communicator& c) {
    require_out(out_comm, "split: out_comm");
    *out_comm = c.split(color, key).release();
  });
}

keel_status all_reduce(void* comm, const void* send, void* recv, size_t count, keel_dtype dtype, int32_t op,
                       keel_comm_request** out_request) {
  return exclusively(comm, "all_reduce", [&](Communicator& c) { c.all_reduce(send, recv, count, dtype, op, out_request); });
}

keel_status reduce_scatter(void* comm, const void* send, void* recv, size_t count, keel_dtype dtype, int32_t op,
                           keel_comm_request** out_request) {
  return exclusively(comm, "reduce_scatter",
                     [&](Communicator& c) { c.reduce_scatter(send, recv, count, dtype, op, out_request); });
}

keel_status all_gather(void* comm, const void* send, void* recv, size_t count, keel_dtype dtype,
                       keel_comm_request** out_request) {
  return exclusively(comm, "all_gather", [&](Communicator& c) { c.all_gather(send, recv, count, dtype, out_request); });
}

keel_status broadcast(void* comm, void* buffer, size_t count, keel_dtype dtype, int32_t root,
                      keel_comm_request** out_request) {
  return exclusively(comm, "broadcast", [&](Communicator& c) { c.broadcast(buffer, count, dtype, root, out_request); });
}

keel_status send(void* comm, const void* buffer, size_t count, keel_dtype dtype, int32_t peer, int32_t tag,
                 keel_comm_request** out_request) {
  return exclusively(comm, "send", [&](Communicator& c) { c.send(buffer, count, dtype, peer, tag, out_request); });
}

keel_status recv(void* comm, void* buffer, size_t count, keel_dtype dtype, int32_t peer, int32_t tag,
                 keel_comm_request** out_request) {
  return exclusively(comm, "recv", [&](Communicator& c) { c.recv(buffer, count, dtype, peer, tag, out_request); });
}

keel_status barrier(void* comm) {
  return exclusively(comm, "barrier", [&](Communicator& c) { c.barrier(); });
}

keel_status wait(void* comm, keel_comm_request* request) {
  return exclusively(comm, "wait", [&](Communicator& c) {
    require_out(request, "wait: request");
    c.wait(request);
  });
}

keel_status counters(void* comm, keel_comm_counters* out) {
  return with_communicator(comm, [&](Communicator& c) {
    require_out(out, "counters: out");
    if (out->struct_size < sizeof(out->struct_size))
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "counters: out->struct_size is not set");
    // A caller built against an older, shorter struct gets the prefix it knows.
    keel_comm_counters value = c.counters();
    value.struct_size = out->struct_size;
    std::memcpy(out, &value, std::min(out->struct_size, sizeof value));
  });
}

keel_status abort_world(void* comm, int32_t exit_code, const char* reason) {
  return with_communicator(comm, [&](Communicator& c) { c.abort_world(exit_code, reason ? reason : "(no reason)"); });
}

keel_status reaches(void* comm, keel_device device, int32_t* out_reach) {
  return with_communicator(comm, [&](Communicator& c) {
    require_out(out_reach, "reaches: out_reach");
    *out_reach = c.reaches(device);
  });
}

const keel_comm_api kApi = {
    sizeof(keel_comm_api), validate_config, create_world, destroy, rank, size, split,
    all_reduce, reduce_scatter, all_gather, broadcast, send, recv, barrier, wait, counters, abort_world,
    create_world_on, reaches,
};

const keel_plugin_info kInfos[] = {keel_support::plugin_info(
    KEEL_KIND_COMM, "nccl", "0.1.0", &kApi,
    "NCCL collectives and point-to-point on the CUDA backend's memory, queued on its stream; one rank per GPU "
    "(verified on one NVIDIA H200, driver 580.159.04, in a world of one; not yet across GPUs)")};

const keel_plugin_list kList = keel_support::plugin_list(kInfos);

}  // namespace
}  // namespace keel_nccl

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &keel_nccl::kList; }
