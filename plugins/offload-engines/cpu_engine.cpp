// The cpu engine's store: memcpy into and out of one aligned allocation per extent. One worker
// copies in submission order; memcpy at host bandwidth needs no more, and order makes a read
// after a write of the same range see the write (more than the contract promises, which is fine).
#include "cpu_engine.hpp"

#include <keel_support/offload/aligned_buffer.hpp>

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace keel_offload {

using keel_support::StatusError;

namespace {

// Large enough that the per-request overhead (a lock, a wake-up) is noise beside the copy.
constexpr uint64_t kCpuIdealRequestBytes = uint64_t(4) << 20;

const CpuEngineConfig& checked(const CpuEngineConfig& config) {
  if (config.capacity_bytes == 0) {
    throw StatusError(KEEL_ERR_INVALID_CONFIG, "cpu engine: capacity_bytes is 0; expected the most bytes of host "
                                               "memory the engine may hold (> 0)");
  }
  uint64_t alignment = config.alignment_bytes;
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) {
    throw StatusError(KEEL_ERR_INVALID_CONFIG, "cpu engine: alignment_bytes " + std::to_string(alignment) +
                                                   " is not a power of two of at least " +
                                                   std::to_string(sizeof(void*)));
  }
  return config;
}

class HostMemoryExtents final : public keel_support::ExtentStore {
 public:
  explicit HostMemoryExtents(uint64_t alignment_bytes) : alignment_bytes_(alignment_bytes) {}

  void add_extent(size_t /*index*/, const std::string& /*name*/, uint64_t bytes) override {
    storage_.emplace_back(bytes, alignment_bytes_);  // zero-filled
  }
  void write(size_t index, uint64_t offset, const void* src, uint64_t bytes) override {
    std::memcpy(storage_[index].data() + offset, src, bytes);
  }
  void read(size_t index, uint64_t offset, void* dst, uint64_t bytes) override {
    std::memcpy(dst, storage_[index].data() + offset, bytes);
  }

 private:
  uint64_t alignment_bytes_;
  std::vector<keel_support::AlignedBuffer> storage_;  // by extent index
};

keel_support::SyncEngineShape shape_of(const CpuEngineConfig& config) {
  keel_support::SyncEngineShape shape;
  shape.kind = "cpu";
  shape.alignment_bytes = config.alignment_bytes;
  shape.ideal_request_bytes = kCpuIdealRequestBytes;
  shape.capacity_bytes = config.capacity_bytes;
  shape.worker_threads = 1;
  return shape;
}

}  // namespace

CpuEngine::CpuEngine(const CpuEngineConfig& config)
    : SyncOffloadEngine(shape_of(checked(config)), std::make_unique<HostMemoryExtents>(config.alignment_bytes)) {}

}  // namespace keel_offload
