// A parameter store array that lives in the offload tier (ZeRO-Offload, ZeRO-Infinity) instead
// of backend memory: one extent of the tier, reserved when the home is made (so a full tier
// fails at create, not at the first step), rounded up to the tier's alignment, reading as zeros
// until written. It has no backend address: the store streams it (state_streamer.hpp) or moves
// element ranges between it and host memory here (checkpoints, bindings, initialisation),
// through an aligned bounce buffer, since a caller's range need not be aligned. A span may be
// written behind (write_span_behind: the caller goes on while it lands); every other access
// of the home first waits for those writes, so nothing reads a block a write still holds.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "keel_support/strategy/offload_tier.hpp"
#include "keel_support/strategy/shard_home.hpp"

namespace keel_support {

class TierHome final : public ShardHome {
 public:
  TierHome(std::shared_ptr<const OffloadTier> tier, std::string name, int64_t elements)
      : tier_(std::move(tier)), name_(std::move(name)), elements_(elements),
        extent_bytes_(tier_->round_up(uint64_t(elements) * sizeof(float))) {
    if (extent_bytes_ > 0) tier_->add_extent(name_, extent_bytes_);
  }
  ~TierHome() override {
    if (!behind_.empty()) tier_->wait_all_quietly();  // their buffers go with this home
  }

  int64_t elements() const override { return elements_; }
  float* data() override {
    throw StatusError(KEEL_ERR_INTERNAL, "the store's array '" + name_ +
                                             "' lives in the offload tier and has no backend address (a path that "
                                             "reaches it directly missed the tier)");
  }
  uint64_t backend_bytes() const override { return 0; }
  TierHome* tiered() override { return this; }

  const OffloadTier& tier() const { return *tier_; }
  const std::string& name() const { return name_; }
  uint64_t extent_bytes() const { return extent_bytes_; }

  // Elements [begin, begin + count) in one aligned host buffer (at points to element begin),
  // read now; write_span puts the whole span back (the caller changed only its own elements).
  struct Span {
    TierBuffer buffer;
    uint64_t offset = 0;
    uint64_t bytes = 0;
    float* at = nullptr;
  };
  Span read_span(int64_t begin, int64_t count) const {
    settle_writes();
    Span span;
    span.offset = tier_->round_down(uint64_t(begin) * sizeof(float));
    span.bytes = tier_->round_up(uint64_t(begin + count) * sizeof(float)) - span.offset;
    span.buffer = TierBuffer(*tier_, std::max(span.bytes, tier_->alignment()));
    span.at = reinterpret_cast<float*>(static_cast<char*>(span.buffer.get()) + (uint64_t(begin) * sizeof(float) - span.offset));
    if (span.bytes > 0) wait_or_drain(tier_->submit_read(name_, span.offset, span.buffer.get(), span.bytes));
    return span;
  }
  void write_span(const Span& span) {
    settle_writes();
    if (span.bytes > 0) wait_or_drain(tier_->submit_write(name_, span.offset, span.buffer.get(), span.bytes));
  }
  // Starts writing the span back and returns; the span's buffer is kept until it lands.
  void write_span_behind(Span span) {
    if (span.bytes == 0) return;
    const uint64_t ticket = tier_->submit_write(name_, span.offset, span.buffer.get(), span.bytes);
    behind_.push_back({std::move(span), ticket});
  }
  // Waits for the writes behind (throws the first one's error, after every one has landed).
  void settle_writes() const {
    if (behind_.empty()) return;
    std::vector<Behind> writes = std::move(behind_);
    behind_.clear();
    for (Behind& write : writes) wait_or_drain(write.ticket);
  }
  // Every element back to zero (a new gradient accumulation), in writes of a few ideal requests.
  void fill_zero() {
    settle_writes();
    if (extent_bytes_ == 0) return;
    const uint64_t piece = std::min(extent_bytes_, std::max(tier_->alignment(), tier_->round_down(tier_->ideal_request_bytes())));
    TierBuffer zeros(*tier_, piece);  // zero-filled (alloc_buffer's contract)
    std::vector<uint64_t> tickets;
    try {
      for (uint64_t offset = 0; offset < extent_bytes_; offset += piece)
        tickets.push_back(tier_->submit_write(name_, offset, zeros.get(), std::min(piece, extent_bytes_ - offset)));
      for (uint64_t ticket : tickets) tier_->wait(ticket);
    } catch (...) {
      tier_->wait_all_quietly();
      throw;
    }
  }

  // Elements [begin, begin + count) to/from host memory, in aligned pieces of at most a few
  // ideal requests; a write reads the edge blocks first so neighbours keep their values.
  void read(int64_t begin, int64_t count, float* dst_host) const {
    move(begin, count, [&](char* bounce, uint64_t skip, uint64_t bytes, uint64_t, uint64_t) {
      std::memcpy(dst_host, bounce + skip, bytes);
      dst_host += bytes / sizeof(float);
    });
  }
  void write(int64_t begin, int64_t count, const float* src_host) {
    move(begin, count, [&](char* bounce, uint64_t skip, uint64_t bytes, uint64_t offset, uint64_t span) {
      std::memcpy(bounce + skip, src_host, bytes);
      src_host += bytes / sizeof(float);
      tier_->wait(tier_->submit_write(name_, offset, bounce, span));
    });
  }

 private:
  void wait_or_drain(uint64_t ticket) const {
    try {
      tier_->wait(ticket);
    } catch (...) {
      tier_->wait_all_quietly();
      throw;
    }
  }

  // Calls use(bounce, skip, bytes, offset, span) per piece, after reading the piece's aligned
  // span [offset, offset + span) into the bounce buffer; the caller's bytes sit at bounce + skip.
  template <typename Use>
  void move(int64_t begin, int64_t count, Use&& use) const {
    settle_writes();
    if (count <= 0) return;
    uint64_t first = uint64_t(begin) * sizeof(float);
    const uint64_t end = uint64_t(begin + count) * sizeof(float);
    // At most a few ideal requests, and no more than this range's aligned span (checkpoints
    // call this once per parameter: a large zero-filled buffer each time would dominate).
    const uint64_t whole = tier_->round_up(end) - tier_->round_down(first);
    const uint64_t piece = std::min(whole, std::max(tier_->alignment(), tier_->round_down(tier_->ideal_request_bytes())));
    TierBuffer bounce(*tier_, piece);
    try {
      while (first < end) {
        const uint64_t offset = tier_->round_down(first);
        const uint64_t last = std::min(end, offset + piece);
        const uint64_t span = tier_->round_up(last) - offset;
        tier_->wait(tier_->submit_read(name_, offset, bounce.get(), span));
        use(static_cast<char*>(bounce.get()), first - offset, last - first, offset, span);
        first = last;
      }
    } catch (...) {
      tier_->wait_all_quietly();  // nothing may write into the bounce buffer once it is freed
      throw;
    }
  }

  struct Behind {
    Span span;
    uint64_t ticket;
  };

  std::shared_ptr<const OffloadTier> tier_;
  mutable std::vector<Behind> behind_;  // writes started by write_span_behind, not waited for
  std::string name_;
  int64_t elements_;
  uint64_t extent_bytes_;
};

// Homes for the arrays `arrays` (KEEL_OFFLOAD_*) in the tier, the rest from `resident`. Extents
// are named by array ("params", "grads", "state0", "state1", ...; the engine keeps ranks apart).
inline HomeFactory tier_homes(std::shared_ptr<const OffloadTier> tier, uint32_t arrays, HomeFactory resident) {
  auto next_slot = std::make_shared<int>(0);
  return [tier, arrays, resident, next_slot](StoreArray array, int64_t elements) -> std::unique_ptr<ShardHome> {
    switch (array) {
      case StoreArray::kParams:
        if (arrays & KEEL_OFFLOAD_PARAMS) return std::make_unique<TierHome>(tier, "params", elements);
        break;
      case StoreArray::kGrads:
        if (arrays & KEEL_OFFLOAD_GRADIENTS) return std::make_unique<TierHome>(tier, "grads", elements);
        break;
      case StoreArray::kState: {
        const int slot = (*next_slot)++;
        if (arrays & KEEL_OFFLOAD_OPTIMIZER_STATE)
          return std::make_unique<TierHome>(tier, "state" + std::to_string(slot), elements);
        break;
      }
    }
    return resident(array, elements);
  };
}

}  // namespace keel_support
