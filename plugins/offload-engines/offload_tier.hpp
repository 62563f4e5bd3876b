// What the offload plugin's create returns: one engine (nvme or cpu) with the host it reports
// through, and the I/O buffers it handed out by alloc_buffer. The C table's slots
// (offload_plugin.cpp) forward here, so the engines keep their plain C++ interface.
#pragma once

#include <keel/host.h>
#include <keel/offload.h>

#include <memory>
#include <string>
#include <unordered_map>

#include "aligned_buffer.hpp"
#include "offload_engine.hpp"

namespace keel_offload {

class OffloadTier {
 public:
  // `source` prefixes the messages ("offload nvme"); `capacity_key` names where the capacity came
  // from in a refusal of add_extent ("offload.capacity_bytes", or the default's origin).
  OffloadTier(const keel_host* host, std::string source, std::unique_ptr<OffloadEngine> engine,
              std::string capacity_key);
  ~OffloadTier();  // the engine finishes what is in flight and removes its files

  const keel_host* host() const { return host_; }
  const char* source() const { return source_.c_str(); }
  OffloadEngine& engine() { return *engine_; }

  keel_offload_info info() const;
  // The engine's add_extent; a refusal for want of room names capacity_key first.
  void add_extent(const std::string& name, uint64_t bytes);
  keel_offload_counters counters() const;

  // Host memory of `bytes` (a positive multiple of the alignment), zero-filled. Not pinned: no
  // backend is a device yet; a device backend (create args device_backend) will register these
  // buffers with it so copies to the device run at full speed.
  void* alloc_buffer(uint64_t bytes);
  // Frees a buffer alloc_buffer gave; NULL is ignored. Throws for a pointer it never gave.
  void free_buffer(void* buffer);

 private:
  const keel_host* host_;
  std::string source_;
  std::unique_ptr<OffloadEngine> engine_;
  std::string capacity_key_;
  std::unordered_map<void*, AlignedBuffer> buffers_;  // freed at destroy if the caller forgot
};

}  // namespace keel_offload
