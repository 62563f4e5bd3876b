// Stage 3's parameter chunks from the resident shard or the offload tier (see param_shard.hpp).
#include "param_shard.hpp"

namespace keel_zero {

ParamShard::ParamShard(const keel_support::StoreLayout& layout, keel_support::BackendOps backend, keel_device device,
                       const float* resident, const keel_support::TierHome* tier)
    : layout_(layout), backend_(backend), device_(device), resident_(resident), tier_(tier),
      staged_(layout.layers.size()) {}

ParamShard::~ParamShard() {
  if (tier_) tier_->tier().wait_all_quietly();  // no read may land in a buffer about to be freed
}

void ParamShard::start_read(int32_t layer) {
  Staged& staged = staged_[size_t(layer)];
  const keel_support::OffloadTier& tier = tier_->tier();
  const keel_support::LayerPlace& place = layout_.layers[size_t(layer)];
  const uint64_t first = uint64_t(place.shard_offset) * sizeof(float);
  const uint64_t offset = tier.round_down(first);
  const uint64_t bytes = tier.round_up(first + uint64_t(place.chunk) * sizeof(float)) - offset;
  staged.host = keel_support::TierBuffer(tier, bytes);
  staged.skip = first - offset;
  staged.copied = false;
  staged.ticket = tier.submit_read(tier_->name(), offset, staged.host.get(), bytes);
}

const float* ParamShard::chunk(int32_t layer) {
  const keel_support::LayerPlace& place = layout_.layers[size_t(layer)];
  if (!tier_) return resident_ + place.shard_offset;
  Staged& staged = staged_[size_t(layer)];
  if (!staged.host.get()) start_read(layer);
  if (staged.ticket) {
    const uint64_t ticket = staged.ticket;
    staged.ticket = 0;
    tier_->tier().wait(ticket);
  }
  const float* host = reinterpret_cast<const float*>(static_cast<const char*>(staged.host.get()) + staged.skip);
  if (device_.device_type == KEEL_DEVICE_CPU) return host;
  if (!staged.copied) {
    staged.device = backend_.alloc_floats(place.chunk);
    backend_.copy(staged.device.floats(), host, place.chunk, KEEL_COPY_HOST_TO_DEVICE);
    staged.copied = true;
  }
  return staged.device.floats();
}

void ParamShard::read_ahead(int32_t layer) {
  if (!tier_ || layer < 0 || size_t(layer) >= staged_.size()) return;
  if (layout_.layers[size_t(layer)].chunk == 0 || staged_[size_t(layer)].host.get()) return;
  start_read(layer);
}

void ParamShard::release(int32_t layer) {
  if (!tier_) return;
  Staged& staged = staged_[size_t(layer)];
  if (staged.ticket) {
    const uint64_t ticket = staged.ticket;
    staged.ticket = 0;
    tier_->tier().wait(ticket);  // its buffer must not be freed under the read
  }
  staged = Staged();
}

void ParamShard::release_all() {
  for (size_t l = 0; l < staged_.size(); ++l) release(int32_t(l));
}

}  // namespace keel_zero
