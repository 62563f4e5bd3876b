// The bridged communicator of comm_bridge.h: a keel_comm_api table whose object remembers the
// plugin's communicator, the backend, the side its callers' buffers are on and the reach.
#include "mesh/comm_bridge.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "host/errors.h"
#include "host/host_table.h"

namespace keel {
namespace {

size_t element_bytes(keel_dtype dtype) { return size_t(dtype.bits) / 8 * (dtype.lanes ? dtype.lanes : 1); }

// One staging buffer: host memory from the backend (backend-side callers) or backend memory
// (host-side callers).
struct Stage {
  void* ptr = nullptr;
  size_t bytes = 0;
};

class Bridge {
 public:
  Bridge(const keel_comm_api* comm, void* obj, keel_support::BackendOps backend, BufferSide side, int32_t reach)
      : comm_(comm), obj_(obj), backend_(backend), side_(side), reach_(reach) {
    if (KEEL_HAS_SLOT(comm_, size)) comm_->size(obj_, &size_);
  }
  ~Bridge() {
    for (Stage& stage : pool_) release_memory(stage);
    if (obj_) comm_->destroy(obj_);
  }

  const keel_comm_api* comm() const { return comm_; }
  void* obj() const { return obj_; }
  int32_t size() const { return size_; }
  bool staged() const { return reach_ == KEEL_COMM_REACH_NONE; }
  keel_support::BackendOps backend() const { return backend_; }
  BufferSide side() const { return side_; }
  int32_t reach() const { return reach_; }

  // Drains the backend's queue before a SYNCED operation on backend memory.
  keel_status order() const {
    if (reach_ != KEEL_COMM_REACH_SYNCED || side_ != BufferSide::kBackend) return KEEL_OK;
    return backend_.api->synchronize(backend_.obj);
  }

  // A staging buffer of at least `bytes`, holding a copy of `from` when it is not NULL.
  keel_status take(size_t bytes, const void* from, Stage* out) {
    *out = Stage{};
    for (size_t i = 0; i < pool_.size(); ++i)
      if (pool_[i].bytes >= bytes) {
        *out = pool_[i];
        pool_.erase(pool_.begin() + long(i));
        break;
      }
    if (!out->ptr) {
      out->bytes = bytes ? bytes : 1;
      if (keel_status status = allocate(out); status != KEEL_OK) return status;
    }
    if (!from || bytes == 0) return KEEL_OK;
    return side_ == BufferSide::kBackend
               ? backend_.api->copy(backend_.obj, out->ptr, from, bytes, KEEL_COPY_DEVICE_TO_HOST)
               : backend_.api->copy(backend_.obj, out->ptr, from, bytes, KEEL_COPY_HOST_TO_DEVICE);
  }
  // Copies the staged result back to the caller's buffer.
  keel_status deliver(const Stage& stage, void* to, size_t bytes) const {
    if (!to || bytes == 0) return KEEL_OK;
    return side_ == BufferSide::kBackend
               ? backend_.api->copy(backend_.obj, to, stage.ptr, bytes, KEEL_COPY_HOST_TO_DEVICE)
               : backend_.api->copy(backend_.obj, to, stage.ptr, bytes, KEEL_COPY_DEVICE_TO_HOST);
  }
  void give_back(Stage stage) {
    if (stage.ptr) pool_.push_back(stage);
  }

 private:
  keel_status allocate(Stage* stage) const {
    if (side_ == BufferSide::kHost) return backend_.api->alloc(backend_.obj, stage->bytes, &stage->ptr);
    if (KEEL_HAS_SLOT(backend_.api, alloc_host)) return backend_.api->alloc_host(backend_.obj, stage->bytes, &stage->ptr);
    stage->ptr = std::aligned_alloc(64, (stage->bytes + 63) / 64 * 64);
    return stage->ptr ? KEEL_OK : KEEL_ERR_OUT_OF_MEMORY;
  }
  void release_memory(Stage& stage) const {
    if (side_ == BufferSide::kHost) backend_.api->free_memory(backend_.obj, stage.ptr);
    else if (KEEL_HAS_SLOT(backend_.api, free_host)) backend_.api->free_host(backend_.obj, stage.ptr);
    else std::free(stage.ptr);
  }

  const keel_comm_api* comm_;
  void* obj_;
  keel_support::BackendOps backend_;
  BufferSide side_;
  int32_t reach_;
  int32_t size_ = 1;
  std::vector<Stage> pool_;
};

// An operation in flight: the plugin's request, and for a staged receive where its result goes.
struct Pending {
  keel_comm_request* inner = nullptr;
  Stage in, out;
  void* deliver_to = nullptr;
  size_t deliver_bytes = 0;
};

Bridge* as_bridge(void* obj) { return static_cast<Bridge*>(obj); }

// Finishes a staged operation: hands its result back and its buffers to the pool.
keel_status finish(Bridge& bridge, Pending& pending) {
  keel_status status = bridge.deliver(pending.out, pending.deliver_to, pending.deliver_bytes);
  if (pending.out.ptr != pending.in.ptr) bridge.give_back(pending.out);
  bridge.give_back(pending.in);
  return status;
}

// Runs `start(in, out, request)` on staged or direct buffers. in_bytes of `send` are staged in,
// out_bytes land in `recv`; in place (send == recv) shares one buffer.
template <typename Start>
keel_status run(void* obj, const void* send, size_t in_bytes, void* recv, size_t out_bytes,
                keel_comm_request** out_request, Start&& start) {
  Bridge& bridge = *as_bridge(obj);
  if (out_request) *out_request = nullptr;
  auto pending = std::make_unique<Pending>();
  keel_comm_request** inner_request = out_request ? &pending->inner : nullptr;
  if (!bridge.staged()) {
    if (keel_status status = bridge.order(); status != KEEL_OK) return status;
    keel_status status = start(send, recv, inner_request);
    if (status == KEEL_OK && out_request) *out_request = reinterpret_cast<keel_comm_request*>(pending.release());
    return status;
  }
  if (send) {
    if (keel_status status = bridge.take(in_bytes, send, &pending->in); status != KEEL_OK) return status;
  }
  if (recv && recv == send && out_bytes <= in_bytes) {
    pending->out = pending->in;
  } else if (recv) {
    if (keel_status status = bridge.take(out_bytes, nullptr, &pending->out); status != KEEL_OK) {
      bridge.give_back(pending->in);
      return status;
    }
  }
  pending->deliver_to = recv;
  pending->deliver_bytes = out_bytes;
  keel_status status = start(pending->in.ptr, pending->out.ptr, inner_request);
  if (status != KEEL_OK) {
    pending->deliver_to = nullptr;
    finish(bridge, *pending);
    return status;
  }
  if (out_request) {
    *out_request = reinterpret_cast<keel_comm_request*>(pending.release());
    return KEEL_OK;
  }
  return finish(bridge, *pending);
}

void destroy(void* obj) { delete as_bridge(obj); }
keel_status rank(void* obj, int32_t* out) { return as_bridge(obj)->comm()->rank(as_bridge(obj)->obj(), out); }
keel_status size(void* obj, int32_t* out) { return as_bridge(obj)->comm()->size(as_bridge(obj)->obj(), out); }

keel_status split(void* obj, int32_t color, int32_t key, void** out) {
  Bridge& bridge = *as_bridge(obj);
  void* part = nullptr;
  if (keel_status status = bridge.comm()->split(bridge.obj(), color, key, &part); status != KEEL_OK) return status;
  try {
    *out = new Bridge(bridge.comm(), part, bridge.backend(), bridge.side(), bridge.reach());
  } catch (const std::bad_alloc&) {
    bridge.comm()->destroy(part);
    return host_table()->set_error(KEEL_ERR_OUT_OF_MEMORY, "comm split: out of memory for the bridged communicator");
  }
  return KEEL_OK;
}

keel_status all_reduce(void* obj, const void* send, void* recv, size_t count, keel_dtype dtype, int32_t op,
                       keel_comm_request** out_request) {
  Bridge& b = *as_bridge(obj);
  const size_t bytes = count * element_bytes(dtype);
  return run(obj, send, bytes, recv, bytes, out_request, [&](const void* s, void* r, keel_comm_request** q) {
    return b.comm()->all_reduce(b.obj(), s, r, count, dtype, op, q);
  });
}

keel_status reduce_scatter(void* obj, const void* send, void* recv, size_t count, keel_dtype dtype, int32_t op,
                           keel_comm_request** out_request) {
  Bridge& b = *as_bridge(obj);
  const size_t bytes = count * element_bytes(dtype);
  return run(obj, send, bytes * size_t(b.size()), recv, bytes, out_request,
             [&](const void* s, void* r, keel_comm_request** q) {
               return b.comm()->reduce_scatter(b.obj(), s, r, count, dtype, op, q);
             });
}

keel_status all_gather(void* obj, const void* send, void* recv, size_t count, keel_dtype dtype,
                       keel_comm_request** out_request) {
  Bridge& b = *as_bridge(obj);
  const size_t bytes = count * element_bytes(dtype);
  return run(obj, send, bytes, recv, bytes * size_t(b.size()), out_request,
             [&](const void* s, void* r, keel_comm_request** q) {
               return b.comm()->all_gather(b.obj(), s, r, count, dtype, q);
             });
}

keel_status broadcast(void* obj, void* buffer, size_t count, keel_dtype dtype, int32_t root,
                      keel_comm_request** out_request) {
  Bridge& b = *as_bridge(obj);
  const size_t bytes = count * element_bytes(dtype);
  return run(obj, buffer, bytes, buffer, bytes, out_request, [&](const void* s, void*, keel_comm_request** q) {
    return b.comm()->broadcast(b.obj(), const_cast<void*>(s), count, dtype, root, q);
  });
}

keel_status send(void* obj, const void* buffer, size_t count, keel_dtype dtype, int32_t peer, int32_t tag,
                 keel_comm_request** out_request) {
  Bridge& b = *as_bridge(obj);
  return run(obj, buffer, count * element_bytes(dtype), nullptr, 0, out_request,
             [&](const void* s, void*, keel_comm_request** q) {
               return b.comm()->send(b.obj(), s, count, dtype, peer, tag, q);
             });
}

keel_status recv(void* obj, void* buffer, size_t count, keel_dtype dtype, int32_t peer, int32_t tag,
                 keel_comm_request** out_request) {
  Bridge& b = *as_bridge(obj);
  return run(obj, nullptr, 0, buffer, count * element_bytes(dtype), out_request,
             [&](const void*, void* r, keel_comm_request** q) {
               return b.comm()->recv(b.obj(), r, count, dtype, peer, tag, q);
             });
}

keel_status all_to_all_v(void* obj, const void* send, const size_t* send_counts, void* recv,
                        const size_t* recv_counts, keel_dtype dtype, keel_comm_request** out_request) {
  Bridge& b = *as_bridge(obj);
  const size_t bytes = element_bytes(dtype);
  size_t send_bytes = 0, recv_bytes = 0;  // NULL counts are the plugin's to refuse
  for (int32_t p = 0; p < b.size() && send_counts && recv_counts; ++p) {
    size_t send_block = 0, recv_block = 0;
    // Staging needs the totals before the plugin sees the counts, so the bridge refuses an overflow itself.
    if (__builtin_mul_overflow(send_counts[p], bytes, &send_block) ||
        __builtin_add_overflow(send_bytes, send_block, &send_bytes) ||
        __builtin_mul_overflow(recv_counts[p], bytes, &recv_block) ||
        __builtin_add_overflow(recv_bytes, recv_block, &recv_bytes))
      return host_table()->set_error(KEEL_ERR_INVALID_ARGUMENT,
                                     ("comm all_to_all_v: the counts through rank " + std::to_string(p) + " (send " +
                                      std::to_string(send_counts[p]) + ", recv " + std::to_string(recv_counts[p]) +
                                      " elements of " + std::to_string(bytes) + " bytes) total more bytes than a "
                                      "size_t holds")
                                         .c_str());
  }
  return run(obj, send, send_bytes, recv, recv_bytes, out_request,
             [&](const void* s, void* r, keel_comm_request** q) {
               return b.comm()->all_to_all_v(b.obj(), s, send_counts, r, recv_counts, dtype, q);
             });
}

keel_status barrier(void* obj) { return as_bridge(obj)->comm()->barrier(as_bridge(obj)->obj()); }

keel_status wait(void* obj, keel_comm_request* request) {
  Bridge& bridge = *as_bridge(obj);
  std::unique_ptr<Pending> pending(reinterpret_cast<Pending*>(request));
  if (!pending) return host_table()->set_error(KEEL_ERR_INVALID_ARGUMENT, "comm wait: request is NULL");
  keel_status status = pending->inner ? bridge.comm()->wait(bridge.obj(), pending->inner) : KEEL_OK;
  if (!bridge.staged()) return status;
  if (status != KEEL_OK) pending->deliver_to = nullptr;
  keel_status delivered = finish(bridge, *pending);
  return status != KEEL_OK ? status : delivered;
}

keel_status counters(void* obj, keel_comm_counters* out) {
  return as_bridge(obj)->comm()->counters(as_bridge(obj)->obj(), out);
}

keel_status abort_world(void* obj, int32_t exit_code, const char* reason) {
  return as_bridge(obj)->comm()->abort_world(as_bridge(obj)->obj(), exit_code, reason);
}

keel_status reaches(void* obj, keel_device, int32_t* out_reach) {
  // Whatever the memory, a bridged communicator keeps the backend's order for its callers.
  (void)obj;
  *out_reach = KEEL_COMM_REACH_SYNCED;
  return KEEL_OK;
}

// Only what a plugin may call on a communicator it was handed: no validate or create; and
// all_to_all_v only where the plugin has it (comm.h: the slot stays optional when bridged).
keel_comm_api bridge_table(bool with_all_to_all_v) {
  keel_comm_api table{};
  table.struct_size = sizeof(table);
  table.destroy = destroy;
  table.rank = rank;
  table.size = size;
  table.split = split;
  table.all_reduce = all_reduce;
  table.reduce_scatter = reduce_scatter;
  table.all_gather = all_gather;
  table.broadcast = broadcast;
  table.send = send;
  table.recv = recv;
  table.barrier = barrier;
  table.wait = wait;
  table.counters = counters;
  table.abort_world = abort_world;
  table.reaches = reaches;
  table.all_to_all_v = with_all_to_all_v ? all_to_all_v : nullptr;
  return table;
}
const keel_comm_api kBridgeTable = bridge_table(true);
const keel_comm_api kBridgeTableWithoutAllToAll = bridge_table(false);

}  // namespace

int32_t comm_reach(const keel_comm_api* comm, void* comm_obj, keel_support::BackendOps backend, BufferSide side) {
  keel_device device{KEEL_DEVICE_CPU, 0};
  if (side == BufferSide::kBackend)
    check_plugin(backend.api->device(backend.obj, &device), "backend device");
  if (!KEEL_HAS_SLOT(comm, reaches))
    return device.device_type == KEEL_DEVICE_CPU ? KEEL_COMM_REACH_SYNCED : KEEL_COMM_REACH_NONE;
  int32_t reach = KEEL_COMM_REACH_NONE;
  check_plugin(comm->reaches(comm_obj, device, &reach), "comm reaches");
  if (reach < KEEL_COMM_REACH_NONE || reach > KEEL_COMM_REACH_QUEUED)
    throw KeelError(KEEL_ERR_INTERNAL, "comm reaches: " + std::to_string(reach) + " is not a KEEL_COMM_REACH_* value");
  return reach;
}

BridgedComm bridge_comm(const keel_comm_api* comm, void* comm_obj, keel_support::BackendOps backend, BufferSide side) {
  const int32_t reach = comm_reach(comm, comm_obj, backend, side);
  // Host memory the comm reaches needs no ordering: the host wrote it.
  if (reach == KEEL_COMM_REACH_QUEUED || (reach == KEEL_COMM_REACH_SYNCED && side == BufferSide::kHost))
    return {comm, comm_obj};
  const keel_comm_api* table = KEEL_HAS_SLOT(comm, all_to_all_v) ? &kBridgeTable : &kBridgeTableWithoutAllToAll;
  return {table, new Bridge(comm, comm_obj, backend, side, reach)};
}

std::string describe_reach(int32_t reach, BufferSide side) {
  const char* memory = side == BufferSide::kBackend ? "the backend's memory" : "host memory";
  switch (reach) {
    case KEEL_COMM_REACH_QUEUED: return std::string("works on ") + memory + " in the backend's queue order";
    case KEEL_COMM_REACH_SYNCED: return std::string("works on ") + memory + " directly";
    default:
      return std::string("cannot reach ") + memory + ": every buffer is staged through " +
             (side == BufferSide::kBackend ? "host memory" : "backend memory");
  }
}

}  // namespace keel
