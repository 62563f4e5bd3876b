// The "cpu" offload engine: extents in host memory, one aligned allocation each, with a cap on
// the bytes it may hold. Its store only allocates and copies; keel_support::SyncOffloadEngine
// runs the copies on one worker thread, so its caller sees the same asynchronous interface as
// the nvme engine and can overlap them with compute. (Pinning for a device backend comes with
// the first device backend.)
#pragma once

#include <keel_support/offload/offload_engine_base.hpp>

#include <cstdint>

namespace keel_offload {

struct CpuEngineConfig {
  uint64_t capacity_bytes = 0;   // the most host memory all extents together may use; > 0
  uint64_t alignment_bytes = 64; // a power of two; the extents' allocations are aligned to it
};

class CpuEngine final : public keel_support::SyncOffloadEngine {
 public:
  // Throws KEEL_ERR_INVALID_CONFIG for a zero capacity or an alignment that is not a power of two.
  explicit CpuEngine(const CpuEngineConfig& config);
};

}  // namespace keel_offload
