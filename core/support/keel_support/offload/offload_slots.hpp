// The offload table of a plugin, written once: every slot of keel_offload_api runs its body
// under guard (no exception crosses the ABI), checks its pointers, and forwards to the engine
// (an OffloadEngine, usually a SyncOffloadEngine). A plugin then writes only validate_config and
// create, which parse its keys and build its engine:
//
//   keel_status create(const keel_host* host, const keel_offload_create_args* args, void** out) {
//     return keel_support::guard(host, kSource, [&] {
//       keel_support::check_offload_create_args(host, args, out);
//       *out = new keel_support::OffloadEngineHandle(host, kSource, std::make_unique<MyEngine>(...));
//     });
//   }
//   const keel_offload_api kApi = keel_support::OffloadSlots::table(validate_config, create);
//
// The handle also keeps the I/O buffers alloc_buffer hands out (in a map by address, so
// free_buffer can tell a pointer it never gave, and destroy frees those a caller leaked), and at
// destroy waits for what is in flight before the engine and the buffers go.
#pragma once

#include <keel/offload.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/offload/aligned_buffer.hpp"
#include "keel_support/offload/offload_engine.hpp"
#include "keel_support/common/sized_output.hpp"

namespace keel_support {

// What create hands out: one engine and the host it reports through.
class OffloadEngineHandle {
 public:
  // `source` prefixes the messages ("offload cpu"); `capacity_key`, where the capacity came from,
  // leads a refusal of add_extent for want of room ("offload.capacity_bytes"); empty: nothing.
  OffloadEngineHandle(const keel_host* host, std::string source, std::unique_ptr<OffloadEngine> engine,
                      std::string capacity_key = std::string())
      : host_(host), source_(std::move(source)), engine_(std::move(engine)), capacity_key_(std::move(capacity_key)) {}
  OffloadEngineHandle(const OffloadEngineHandle&) = delete;
  OffloadEngineHandle& operator=(const OffloadEngineHandle&) = delete;
  ~OffloadEngineHandle() {
    try {
      engine_->wait_all();
    } catch (const std::exception& e) {
      // Nobody is left to wait on these requests; their data is being thrown away anyway.
      if (host_) keel_logf(host_, KEEL_LOG_WARN, source_.c_str(), "a request still in flight at destroy failed: %s", e.what());
    }
    engine_.reset();  // before the buffers: requests in flight point into them
    buffers_.clear();
  }

  const keel_host* host() const { return host_; }
  const char* source() const { return source_.c_str(); }
  OffloadEngine& engine() { return *engine_; }

  keel_offload_info info() const {
    keel_offload_info info{};
    info.struct_size = sizeof info;
    info.alignment_bytes = engine_->alignment_bytes();
    info.ideal_request_bytes = engine_->ideal_request_bytes();
    info.capacity_bytes = engine_->capacity_bytes();
    return info;
  }
  keel_offload_counters counters() const {
    const OffloadCounters totals = engine_->counters();
    keel_offload_counters out{};
    out.struct_size = sizeof out;
    out.bytes_read = totals.bytes_read;
    out.bytes_written = totals.bytes_written;
    out.requests_completed = totals.requests_completed;
    out.busy_seconds = totals.busy_seconds;
    return out;
  }

  void add_extent(const std::string& name, uint64_t bytes) {
    try {
      engine_->add_extent(name, bytes);
    } catch (const StatusError& e) {
      // KEEL_ERR_OUT_OF_MEMORY: past the capacity (or past what the host would allocate), which
      // is fixed through the capacity key, so name it.
      if (e.code != KEEL_ERR_OUT_OF_MEMORY || capacity_key_.empty()) throw;
      throw StatusError(e.code, capacity_key_ + ": " + e.what());
    }
  }

  // Host memory of `bytes` (a positive multiple of the alignment), zero-filled. Not pinned: the
  // engine has no backend. A strategy built on keel_support takes the buffers it copies to a
  // device backend from that backend's alloc_host instead (offload_tier.hpp), pinned there.
  void* alloc_buffer(uint64_t bytes) {
    const uint64_t alignment = engine_->alignment_bytes();
    if (bytes == 0 || bytes % alignment != 0)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "alloc_buffer: " + std::to_string(bytes) +
                                                       " bytes; expected a positive multiple of the tier's alignment " +
                                                       std::to_string(alignment));
    AlignedBuffer buffer(bytes, alignment);
    void* address = buffer.data();
    buffers_.emplace(address, std::move(buffer));
    return address;
  }
  // NULL is ignored; throws for a pointer alloc_buffer never gave (a caller bug that would
  // otherwise corrupt the heap).
  void free_buffer(void* buffer) {
    if (buffer == nullptr) return;
    if (buffers_.erase(buffer) == 0)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "free_buffer: this tier's alloc_buffer never gave the buffer it "
                                                   "was passed (or it was freed already)");
  }

 private:
  const keel_host* host_;
  std::string source_;
  std::unique_ptr<OffloadEngine> engine_;
  std::string capacity_key_;
  std::unordered_map<void*, AlignedBuffer> buffers_;  // freed at destroy if the caller forgot
};

// The checks every create makes of its arguments before reading them.
inline void check_offload_create_args(const keel_host* host, const keel_offload_create_args* args,
                                      void** out_engine) {
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

struct OffloadSlots {
  // Runs body(handle) under guard; without a handle there is no host to carry a message.
  template <typename Body>
  static keel_status with(void* engine, Body&& body) noexcept {
    auto* handle = static_cast<OffloadEngineHandle*>(engine);
    if (!handle) return KEEL_ERR_INVALID_ARGUMENT;
    return guard(handle->host(), handle->source(), [&] { body(*handle); });
  }
  static std::string name_of(const char* name) {
    if (!name) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "the extent name is NULL");
    return name;
  }

  static void destroy(void* engine) { delete static_cast<OffloadEngineHandle*>(engine); }
  static keel_status describe(void* engine, keel_offload_info* out) {
    return with(engine, [&](OffloadEngineHandle& handle) {
      write_sized_output(out, handle.info(), sizeof(keel_offload_info), "describe: out");
    });
  }
  static keel_status add_extent(void* engine, const char* name, uint64_t bytes) {
    return with(engine, [&](OffloadEngineHandle& handle) { handle.add_extent(name_of(name), bytes); });
  }
  static keel_status submit_write(void* engine, const char* name, uint64_t offset, const void* src, uint64_t bytes,
                                  uint64_t* out_ticket) {
    return with(engine, [&](OffloadEngineHandle& handle) {
      if (!out_ticket) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "submit_write: out_ticket is NULL");
      *out_ticket = handle.engine().submit_write(name_of(name), offset, src, bytes);
    });
  }
  static keel_status submit_read(void* engine, const char* name, uint64_t offset, void* dst, uint64_t bytes,
                                 uint64_t* out_ticket) {
    return with(engine, [&](OffloadEngineHandle& handle) {
      if (!out_ticket) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "submit_read: out_ticket is NULL");
      *out_ticket = handle.engine().submit_read(name_of(name), offset, dst, bytes);
    });
  }
  static keel_status wait(void* engine, uint64_t ticket) {
    return with(engine, [&](OffloadEngineHandle& handle) { handle.engine().wait(ticket); });
  }
  static keel_status wait_all(void* engine) {
    return with(engine, [&](OffloadEngineHandle& handle) { handle.engine().wait_all(); });
  }
  static keel_status counters(void* engine, keel_offload_counters* out) {
    return with(engine, [&](OffloadEngineHandle& handle) {
      write_sized_output(out, handle.counters(), sizeof(keel_offload_counters), "counters: out");
    });
  }
  static keel_status alloc_buffer(void* engine, uint64_t bytes, void** out_buffer) {
    return with(engine, [&](OffloadEngineHandle& handle) {
      if (!out_buffer) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "alloc_buffer: out_buffer is NULL");
      *out_buffer = handle.alloc_buffer(bytes);
    });
  }
  // No status to return: a refusal is logged.
  static void free_buffer(void* engine, void* buffer) {
    auto* handle = static_cast<OffloadEngineHandle*>(engine);
    if (!handle) return;
    try {
      handle->free_buffer(buffer);
    } catch (const std::exception& e) {
      keel_logf(handle->host(), KEEL_LOG_ERROR, handle->source(), "%s", e.what());
    }
  }

  // The whole 0.7 table around the plugin's validate_config and create.
  static constexpr keel_offload_api table(decltype(keel_offload_api::validate_config) validate_config,
                                          decltype(keel_offload_api::create) create) {
    return keel_offload_api{sizeof(keel_offload_api), validate_config, create, destroy, describe, add_extent,
                            submit_write, submit_read, wait, wait_all, counters, alloc_buffer, free_buffer};
  }
};

}  // namespace keel_support
