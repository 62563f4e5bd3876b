// The buffers live in a map by address so free_buffer can tell a pointer it never gave (a caller
// bug that would otherwise corrupt the heap) and destroy can free those a caller leaked.
#include "offload_tier.hpp"

#include <keel_support/abi_guard.hpp>

#include <utility>

namespace keel_offload {

using keel_support::StatusError;

OffloadTier::OffloadTier(const keel_host* host, std::string source, std::unique_ptr<OffloadEngine> engine,
                         std::string capacity_key)
    : host_(host), source_(std::move(source)), engine_(std::move(engine)), capacity_key_(std::move(capacity_key)) {}

OffloadTier::~OffloadTier() {
  try {
    engine_->wait_all();
  } catch (const std::exception& e) {
    // Nobody is left to wait on these requests; their data is being thrown away anyway.
    if (host_) keel_logf(host_, KEEL_LOG_WARN, source_.c_str(), "a request still in flight at destroy failed: %s", e.what());
  }
  engine_.reset();  // before the buffers: requests in flight point into them
  buffers_.clear();
}

keel_offload_info OffloadTier::info() const {
  keel_offload_info info{};
  info.struct_size = sizeof info;
  info.alignment_bytes = engine_->alignment_bytes();
  info.ideal_request_bytes = engine_->ideal_request_bytes();
  info.capacity_bytes = engine_->capacity_bytes();
  return info;
}

keel_offload_counters OffloadTier::counters() const {
  const OffloadCounters totals = engine_->counters();
  keel_offload_counters out{};
  out.struct_size = sizeof out;
  out.bytes_read = totals.bytes_read;
  out.bytes_written = totals.bytes_written;
  out.requests_completed = totals.requests_completed;
  out.busy_seconds = totals.busy_seconds;
  return out;
}

void OffloadTier::add_extent(const std::string& name, uint64_t bytes) {
  try {
    engine_->add_extent(name, bytes);
  } catch (const StatusError& e) {
    // KEEL_ERR_OUT_OF_MEMORY: past the capacity (or, for the cpu engine, past what the host would
    // allocate): fixed through the capacity key, so name it.
    if (e.code != KEEL_ERR_OUT_OF_MEMORY) throw;
    throw StatusError(e.code, capacity_key_ + ": " + e.what());
  }
}

void* OffloadTier::alloc_buffer(uint64_t bytes) {
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

void OffloadTier::free_buffer(void* buffer) {
  if (buffer == nullptr) return;
  if (buffers_.erase(buffer) == 0)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "free_buffer: this tier's alloc_buffer never gave the buffer it was "
                                                 "passed (or it was freed already)");
}

}  // namespace keel_offload
